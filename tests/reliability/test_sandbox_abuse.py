"""Hostile commands: fork bombs, escapes from the process tree, other sandboxes' files.

The process-count tests use user='per_sandbox', so each sandbox has its own uid: the count is then
exact, and a watchdog can kill everything the test started by uid if containment ever fails.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from environments.rollout.sandbox.isolation import detect_isolation
from environments.rollout.sandbox.limits import SandboxLimits
from environments.rollout.sandbox.process_tree import pids_of_uid
from environments.rollout.sandbox.sandbox import Sandbox

pytestmark = [
    pytest.mark.reliability,
    pytest.mark.skipif(os.geteuid() != 0, reason="these tests need root to drop privileges"),
]
ISOLATION = detect_isolation(allow_network=False)


@contextlib.contextmanager
def watchdog(uid: int, seconds: float) -> Iterator[threading.Event]:
    """If the block runs longer than `seconds`, SIGKILL every process of `uid` and set the event."""
    fired = threading.Event()

    def fire() -> None:
        fired.set()
        for _ in range(20):
            for pid in pids_of_uid(uid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.05)

    timer = threading.Timer(seconds, fire)
    timer.daemon = True
    timer.start()
    try:
        yield fired
    finally:
        timer.cancel()


COUNT_PROBE = r"""
import os, subprocess
me = os.getuid()
def mine():
    n = 0
    for p in os.listdir('/proc'):
        if p.isdigit():
            try:
                with open('/proc/%s/status' % p) as f:
                    n += any(l.startswith('Uid:') and int(l.split()[1]) == me for l in f)
            except OSError:
                pass
    return n
before = mine()
started = []
failed = 0
for _ in range(LIMIT + 1):
    try:
        started.append(subprocess.Popen(['sleep', '30']))
    except OSError as exc:
        failed += 1
print('before', before, 'started', len(started), 'failed', failed)
for p in started:
    p.kill()
    p.wait()
"""


@pytest.mark.skipif(not ISOLATION.pid_namespace, reason="exact count needs a private /proc")
async def test_probe_nproc_limit_holds_exactly_for_the_sandbox_user():
    limit = 8
    limits = SandboxLimits(max_processes=limit, user="per_sandbox", command_timeout_s=20)
    async with Sandbox.create(limits) as sb:
        with watchdog(sb.uid, 25) as fired:
            result = await sb.run(f'exec python3 -c "{COUNT_PROBE.replace("LIMIT", str(limit))}"')
        assert not fired.is_set()
        words = result.output.split()
        counts = dict(zip(words[::2], map(int, words[1::2]), strict=True))
        # N+1 attempts under a limit of N: exactly the room that was left starts, the rest fail.
        assert counts["before"] + counts["started"] == limit, result.output
        assert counts["failed"] == limit + 1 - counts["started"] >= 1


async def test_probe_nproc_limit_holds_for_nobody_too():
    limit = 6
    async with Sandbox.create(SandboxLimits(max_processes=limit, command_timeout_s=20)) as sb:
        result = await sb.run(f'exec python3 -c "{COUNT_PROBE.replace("LIMIT", str(limit))}"')
        words = result.output.split()
        counts = dict(zip(words[::2], map(int, words[1::2]), strict=True))
        # Other processes of uid 65534 on the machine can only lower what starts.
        assert counts["started"] <= limit - 1
        assert counts["failed"] >= 2


async def test_fork_bomb_is_contained_and_fully_killed():
    limit = 32
    limits = SandboxLimits(max_processes=limit, user="per_sandbox", command_timeout_s=3, cpu_time_s=5)
    async with Sandbox.create(limits) as sb:
        uid = sb.uid
        assert uid is not None
        peak = 0
        stop = asyncio.Event()

        async def sample() -> None:
            nonlocal peak
            while not stop.is_set():
                peak = max(peak, len(pids_of_uid(uid)))
                await asyncio.sleep(0.02)

        sampler = asyncio.create_task(sample())
        with watchdog(uid, 30) as fired:
            start = time.monotonic()
            result = await asyncio.wait_for(sb.run("bomb() { bomb | bomb & }; bomb; sleep 30"), 40)
            elapsed = time.monotonic() - start
        stop.set()
        await sampler
        assert not fired.is_set(), "watchdog had to kill the bomb"
        assert result.timed_out and elapsed < 15
        assert 0 < peak <= limit
    # Everything of that uid is gone once the sandbox is closed, and the machine still works.
    assert pids_of_uid(uid) == []
    assert subprocess.run(["true"], check=False).returncode == 0


@pytest.mark.skipif(not ISOLATION.pid_namespace, reason="needs a PID namespace")
async def test_processes_that_leave_the_process_group_are_killed():
    limits = SandboxLimits(command_timeout_s=1, user="per_sandbox")
    async with Sandbox.create(limits) as sb:
        uid = sb.uid
        result = await sb.run("setsid sleep 95.5501 & (setsid sleep 95.5502 &); exec setsid sleep 95.5503")
        assert result.timed_out
        assert pids_of_uid(uid) == []
        result = await sb.run("setsid sleep 95.5504 & disown; echo done")
        assert result.output.strip() == "done"
        await asyncio.sleep(0.1)
        assert pids_of_uid(uid) == []


async def test_closing_stdout_does_not_escape_the_timeout():
    async with Sandbox.create(SandboxLimits(command_timeout_s=1)) as sb:
        start = time.monotonic()
        result = await sb.run("exec >&- 2>&-; sleep 20")
        assert result.timed_out and time.monotonic() - start < 5


@pytest.fixture
def visible_root():
    """A sandbox root outside /tmp, so other sandboxes can see the path and only permissions
    (not the private /tmp mounts) keep them out."""
    root = Path(tempfile.mkdtemp(prefix="hermes-opd-test-", dir="/var/lib"))
    root.chmod(0o755)
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


async def test_per_sandbox_users_cannot_read_each_other(visible_root):
    limits = SandboxLimits(user="per_sandbox")
    async with (
        Sandbox.create(limits, root_dir=visible_root) as a,
        Sandbox.create(limits, root_dir=visible_root) as b,
    ):
        assert a.uid != b.uid
        await a.run("echo top-secret > secret.txt")
        result = await b.run(f"cat {a.workdir}/secret.txt; ls {a.workdir}")
        assert "top-secret" not in result.output
        # Permission denied where only file modes keep sandboxes apart; not even visible with
        # the allow-list root.
        denied = result.output.count("Permission denied") + result.output.count("No such file or directory")
        assert denied == 2


async def test_other_sandboxes_are_not_even_visible_by_default():
    async with Sandbox.create() as a, Sandbox.create() as b:
        await a.run("echo top-secret > secret.txt")
        result = await b.run(f"cat {a.workdir}/secret.txt")
        assert "top-secret" not in result.output
        if ISOLATION.private_tmp:
            assert "No such file or directory" in result.output
            listing = await b.run("ls -a /tmp")
            assert listing.output.split() == [".", "..", b.workdir.parent.name]


async def test_sandbox_user_cannot_move_or_replace_its_working_directory():
    async with Sandbox.create() as sb:
        result = await sb.run("cd .. && mv work elsewhere; ln -s /etc work2; ls -d work")
        assert "Permission denied" in result.output
        assert sb.workdir.is_dir() and not (sb.workdir.parent / "elsewhere").exists()


async def test_many_sandboxes_at_once_clean_up_completely():
    async def one(i: int):
        async with Sandbox.create(SandboxLimits(command_timeout_s=2)) as sb:
            result = await sb.run(f"echo {i} > n.txt; cat n.txt; sleep 97.{i:04d} &")
            return result.output.strip(), sb.workdir

    results = await asyncio.gather(*(one(i) for i in range(16)))
    assert [out for out, _ in results] == [str(i) for i in range(16)]
    assert not any(workdir.exists() or workdir.parent.exists() for _, workdir in results)
