"""What a sandbox shares with the host and with other sandboxes: nothing but its own directory.
The allow-list root, IPC/UTS namespaces, the tmpfs container (disk quota, cleanup that no tree can
break) and the reaping of containers whose owner was killed (environments/rollout/sandbox/root.py,
environments/rollout/sandbox/disk.py)."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from environments.rollout.sandbox.disk import container_mounts, owner_alive, reap_stale
from environments.rollout.sandbox.isolation import detect_isolation
from environments.rollout.sandbox.limits import SandboxLimits
from environments.rollout.sandbox.sandbox import Sandbox
from environments.tasks.builtin import DATA_DIR, builtin_tasks

pytestmark = [
    pytest.mark.reliability,
    pytest.mark.skipif(os.geteuid() != 0, reason="the allow-list root and the tmpfs container need root"),
]
ISOLATION = detect_isolation(allow_network=False)
needs_root_fs = pytest.mark.skipif(not ISOLATION.private_root, reason="no allow-list root on this machine")
PROJECT = Path(__file__).resolve().parents[2]
ANSWERS = ("world hello", "fox brown quick the")  # expected values of reverse_words' hidden tests


@contextlib.contextmanager
def copies_of_the_package():
    """Copies of the package's task data where an install or a second checkout could be: /opt, and
    a site-packages directory inside the sandbox interpreter's own stdlib directory."""
    made: list[Path] = []
    stdlib = ISOLATION.root.package_roots[0] if ISOLATION.root and ISOLATION.root.package_roots else "/opt"
    site = Path(stdlib) / "site-packages"
    created_site = not site.exists()
    try:
        for parent in (
            Path("/opt") / f"hermes-opd-copy-{os.getpid()}",
            site / f"hermes-opd-copy-{os.getpid()}",
        ):
            shutil.copytree(PROJECT / "environments", parent / "environments")
            os.chmod(parent, 0o755)
            made.append(parent)
        yield [p / "environments" / "tasks" / "data" for p in made]
    finally:
        for path in made:
            shutil.rmtree(path, ignore_errors=True)
        if created_site:
            shutil.rmtree(site, ignore_errors=True)


SEARCH = (
    "find / -path /proc -prune -o \\( -name tests.json -o -name solution.py -o -name task.json \\) -print"
)


@needs_root_fs
async def test_hidden_tests_and_solutions_are_unreadable_from_every_copy_of_the_package():
    reference = builtin_tasks()[0].reference_solution["solution.py"].splitlines()[1].strip()
    with copies_of_the_package() as copies:
        for copy in copies:  # readable on the host, by anyone
            assert ANSWERS[0] in (copy / "reverse_words" / "tests.json").read_text()
        probe = " ; ".join(
            [f"cat {c}/reverse_words/tests.json {c}/reverse_words/solution.py" for c in copies]
            + [
                f"cat {DATA_DIR}/reverse_words/tests.json",
                f"ls {PROJECT} /opt /work",
                "grep -rs -l 'world hello' / --exclude-dir=proc | head -5",
                "echo probe-done",
            ]
        )
        async with Sandbox.create() as sb:
            result = await sb.run(probe, timeout_s=120)
            found = await sb.run(SEARCH, timeout_s=120)
    assert result.output.rstrip().endswith("probe-done"), result.output
    for secret in (*ANSWERS, reference):
        assert secret not in result.output, (secret, result.output)
    assert found.output == "" and found.exit_code == 0, found.output
    assert result.output.count("No such file or directory") >= 2 * len(copies) + 1


_IPC_CREAT = 0o1000
_libc = ctypes.CDLL(None, use_errno=True)


def host_has_segment(key: int) -> bool:
    return _libc.shmget(ctypes.c_int(key), ctypes.c_size_t(0), ctypes.c_int(0)) != -1


MAKE_SEGMENT = (
    "python3 -c \"import ctypes; c = ctypes.CDLL(None); print('shm', c.shmget({key}, 1 << 20, 0o1666))\""
)


@needs_root_fs
async def test_sysv_segments_and_files_outside_the_workdir_are_private_and_gone_after_close():
    key = 0x48000000 + (os.getpid() & 0xFFFFFF)
    assert not host_has_segment(key)
    writes = "; ".join(
        f"echo payload-7c1 > {d}/from-a.txt 2>&1" for d in ("/tmp", "/var/tmp", "/dev/shm", "/run/lock")
    )
    async with Sandbox.create() as a, Sandbox.create(SandboxLimits(user="per_sandbox")) as b:
        made = await a.run(MAKE_SEGMENT.format(key=key) + "; " + writes + "; ipcs -m")
        assert "shm 0" in made.output or "shm " in made.output, made.output
        assert format(key, "#010x") in made.output  # A sees its own segment
        assert "/run/lock/from-a.txt: No such file or directory" in made.output
        writable = await a.run("find / -path /proc -prune -o -type d -writable -print 2>/dev/null | sort")
        assert set(writable.output.split()) <= {str(a.workdir), "/tmp", "/var/tmp", "/dev/shm"}, (
            writable.output
        )
        assert {str(a.workdir), "/tmp"} <= set(writable.output.split())
        seen = await b.run(f"ipcs -m; ls -a /tmp /var/tmp /dev/shm; cat /tmp/from-a.txt {a.workdir}/x 2>&1")
        assert format(key, "#010x") not in seen.output and "payload-7c1" not in seen.output, seen.output
        assert "from-a.txt: No such file or directory" in seen.output
        assert not host_has_segment(key)  # not even the host sees it
        again = await a.run("ipcs -m; cat /tmp/from-a.txt")
        assert format(key, "#010x") not in again.output  # one IPC namespace per command
        assert "payload-7c1" in again.output  # the sandbox's own /tmp persists across its commands
        container = a.workdir.parent
    assert not host_has_segment(key)
    assert not container.exists()


@needs_root_fs
async def test_the_disk_quota_covers_all_files_together():
    limits = SandboxLimits(disk_quota_mb=24, file_size_mb=16)
    async with Sandbox.create(limits) as sb:
        result = await sb.run(
            "for i in 1 2 3; do head -c 6M /dev/zero > w$i || echo failed w$i; done; "
            "for i in 1 2 3; do head -c 6M /dev/zero > /tmp/t$i || echo failed t$i; done; "
            "du -sk . /tmp | awk '{s += $1} END {print \"total_kib\", s}'"
        )
    total = int(result.output.split("total_kib")[1].split()[0])
    assert total <= 24 * 1024, result.output
    assert "No space left on device" in result.output and "failed" in result.output


async def test_a_5000_level_tree_is_removed_and_close_does_not_raise():
    sb = await Sandbox.open(SandboxLimits())
    container = sb.workdir.parent
    made = await sb.run(
        "python3 -c \"import os\nfor _ in range(5000):\n    os.mkdir('d'); os.chdir('d')\nprint(len(os.getcwd()))\"",
        timeout_s=120,
    )
    assert int(made.output.split()[-1]) > 10_000, made.output
    await sb.close()
    assert not container.exists()
    assert str(container) not in container_mounts()


HOLDER = """
import asyncio, sys
from environments.rollout.sandbox.sandbox import Sandbox
async def main():
    sandbox = await Sandbox.open(root_dir=sys.argv[1])
    await sandbox.run("mkdir -p a/b/c && echo x > a/b/c/f")
    print(sandbox.workdir.parent, flush=True)
    await asyncio.sleep(600)
asyncio.run(main())
"""


def start_holder(root: Path) -> tuple[subprocess.Popen, Path]:
    env = {**os.environ, "PYTHONPATH": str(PROJECT)}
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(root)], stdout=subprocess.PIPE, text=True, env=env
    )
    return holder, Path(holder.stdout.readline().strip())


async def test_sandboxes_of_a_killed_process_are_reaped_at_the_next_start(tmp_path):
    root = tmp_path / "sandboxes"
    holders = [start_holder(root) for _ in range(2)]
    live, live_container = start_holder(root)
    try:
        for holder, container in holders:
            assert container.is_dir() and owner_alive(container) is True
            holder.send_signal(signal.SIGKILL)
            holder.wait(10)
            assert container.is_dir() and owner_alive(container) is False  # left behind
        assert sorted(reap_stale(root)) == sorted(c for _, c in holders)
        for _, container in holders:
            assert not container.exists() and str(container) not in container_mounts()
        assert live_container.is_dir()  # a running owner's sandbox is left alone
        # The next process that opens a sandbox there reaps on its own.
        live.send_signal(signal.SIGKILL)
        live.wait(10)
        code = "import asyncio, sys\nfrom environments.rollout.sandbox.sandbox import Sandbox\n"
        code += "async def m():\n    async with Sandbox.create(root_dir=sys.argv[1]):\n        pass\nasyncio.run(m())\n"
        env = {**os.environ, "PYTHONPATH": str(PROJECT)}
        subprocess.run([sys.executable, "-c", code, str(root)], check=True, env=env, timeout=60)
        assert not live_container.exists()
        assert sorted(p.name for p in root.iterdir()) == []
    finally:
        for process in [live, *(h for h, _ in holders)]:
            if process.poll() is None:
                process.kill()
                process.wait(10)
        reap_stale(root)


async def test_concurrent_sandboxes_each_get_their_own_container_mount():
    async with asyncio.timeout(60):
        async with Sandbox.create() as a, Sandbox.create() as b:
            mounts = container_mounts()
            assert str(a.workdir.parent) in mounts and str(b.workdir.parent) in mounts
        assert str(a.workdir.parent) not in container_mounts()
    assert tempfile.gettempdir()  # (the session-finish check asserts no container is left)


# -- what held before the allow-list root, kept as tests -------------------------------------------


async def test_host_secrets_and_abstract_sockets_are_out_of_reach():
    import socket

    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    name = f"hermes-opd-test-{os.getpid()}"
    listener.bind("\0" + name)
    listener.listen(1)
    try:
        probe = (
            "cat /etc/shadow 2>&1; ls /root 2>&1; "
            'python3 -c "import socket; s = socket.socket(socket.AF_UNIX); '
            f"s.connect(chr(0) + '{name}'); print('CONNECTED')\" 2>&1 | tail -1"
        )
        async with Sandbox.create() as sb:
            result = await sb.run(probe)
    finally:
        listener.close()
    assert "root:" not in result.output and "CONNECTED" not in result.output, result.output
    assert "ConnectionRefusedError" in result.output or "FileNotFoundError" in result.output, result.output


async def test_symlink_swaps_race_the_file_tools_without_a_leak(tmp_path):
    from environments.rollout.tool_calls import ToolCall
    from environments.rollout.tools import execute_tool_call

    secret = tmp_path / "secret.txt"
    secret.write_text("host-secret-31\n")
    secret.chmod(0o644)
    tmp_path.chmod(0o755)
    swapper = f"while true; do echo mine > f.new; mv -f f.new f; ln -sfn {secret} f; done"
    attempts = leaks = 0
    async with Sandbox.create() as sb:
        background = asyncio.create_task(sb.run(swapper, timeout_s=30))
        try:
            deadline = asyncio.get_running_loop().time() + 6
            while asyncio.get_running_loop().time() < deadline:
                read = await execute_tool_call(
                    ToolCall(name="read_file", arguments={"path": "f"}, raw="", id="r"), sb
                )
                write = ToolCall(
                    name="write_file", arguments={"path": "f", "content": "agent\n"}, raw="", id="w"
                )
                await execute_tool_call(write, sb)
                attempts += 2
                leaks += "host-secret-31" in read.content
        finally:
            background.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await background
    assert attempts > 200
    assert leaks == 0 and secret.read_text() == "host-secret-31\n"
