"""Sandbox behaviour: limits, timeouts, cleanup, isolation, output handling."""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import pytest

from environments.rollout.sandbox.disk import reap_stale
from environments.rollout.sandbox.isolation import default_hidden_paths, detect_isolation
from environments.rollout.sandbox.limits import NOBODY_UID, CommandResult, SandboxError, SandboxLimits
from environments.rollout.sandbox.sandbox import Sandbox
from environments.tasks.builtin import DATA_DIR

IS_ROOT = os.geteuid() == 0
ISOLATION = detect_isolation(allow_network=False)
needs_root = pytest.mark.skipif(not IS_ROOT, reason="privilege drop needs root")
needs_netns = pytest.mark.skipif(not ISOLATION.network_isolated, reason="no network namespace here")
needs_pidns = pytest.mark.skipif(not ISOLATION.pid_namespace, reason="no PID namespace here")
needs_private_tmp = pytest.mark.skipif(not ISOLATION.private_tmp, reason="no private /tmp here")


def processes_matching(marker: str) -> list[int]:
    """pids whose command line contains `marker`."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = Path(f"/proc/{entry.name}/cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue
        if marker.encode() in cmdline:
            found.append(int(entry.name))
    return found


def my_children() -> list[tuple[int, str]]:
    """(pid, state) of this process's direct children, zombies included."""
    children = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry.name}/stat").read_bytes()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2 :].split()
        if int(fields[1]) == os.getpid():
            children.append((int(entry.name), fields[0].decode()))
    return children


async def wait_until(predicate, timeout_s: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        await asyncio.sleep(0.02)
    return predicate()


async def test_runs_a_command_in_its_own_directory():
    async with Sandbox.create() as sb:
        result = await sb.run("pwd; echo hello >&2; exit 3")
        assert isinstance(result, CommandResult)
        assert result.exit_code == 3
        assert result.output.splitlines() == [str(sb.workdir), "hello"]  # stderr merged
        assert not result.timed_out and not result.truncated
        assert result.duration_s < 5
        workdir = sb.workdir
        assert workdir.is_dir()
    assert not workdir.exists()
    assert not workdir.parent.exists()


@needs_root
async def test_commands_run_as_nobody_and_can_write_their_directory():
    async with Sandbox.create() as sb:
        assert sb.uid == NOBODY_UID
        result = await sb.run(
            "id -u; id -G; echo data > f.txt && cat f.txt; touch /etc/hermes-test 2>&1; echo $?"
        )
        lines = result.output.splitlines()
        assert lines[0] == str(NOBODY_UID)
        assert lines[1] == str(NOBODY_UID)  # no supplementary groups (root's are dropped)
        assert lines[2] == "data"
        assert ("Permission denied" in result.output or "Read-only file system" in result.output) and lines[
            -1
        ] != "0"
        assert not Path("/etc/hermes-test").exists()


@needs_root
async def test_privileges_are_fully_dropped():
    async with Sandbox.create() as sb:
        result = await sb.run("grep -E '^(Uid|Gid|Groups|NoNewPrivs|CapEff):' /proc/self/status")
        fields = dict(line.split(":", 1) for line in result.output.splitlines())
        assert fields["Uid"].split() == [str(NOBODY_UID)] * 4  # real, effective, saved, fs
        assert fields["Gid"].split() == [str(NOBODY_UID)] * 4
        assert fields["Groups"].strip() == ""
        assert fields["NoNewPrivs"].strip() == "1"
        assert int(fields["CapEff"], 16) == 0


@needs_private_tmp
async def test_tmp_is_private_to_the_sandbox_and_persists_across_its_commands():
    host_file = Path(tempfile.gettempdir()) / f"hermes-host-only-{os.getpid()}.txt"
    host_file.write_text("host secret")
    try:
        async with Sandbox.create() as a, Sandbox.create() as b:
            first = await a.run(
                f"cat {host_file}; echo note > /tmp/a.txt && echo shm > /dev/shm/s && echo ok"
            )
            assert "host secret" not in first.output and first.output.strip().endswith("ok")
            assert (await a.run("cat /tmp/a.txt /dev/shm/s /var/tmp/a.txt")).output.split() == [
                "note",
                "shm",
                "note",
            ]
            assert "No such file" in (await b.run("cat /tmp/a.txt")).output
            py = await a.run("python3 -c 'import tempfile; print(tempfile.gettempdir())'; pwd; touch in-work")
            assert py.output.split() == ["/tmp", str(a.workdir)]
            assert (a.workdir / "in-work").exists()
            container = a.workdir.parent
        assert not container.exists()
        assert not Path("/tmp/a.txt").exists() and not Path("/dev/shm/s").exists()
    finally:
        host_file.unlink()


@needs_private_tmp
async def test_the_source_tree_with_the_hidden_tests_is_hidden():
    (project,) = default_hidden_paths()
    tasks_file = (DATA_DIR / "merge_intervals" / "tests.json").resolve()
    assert tasks_file.is_relative_to(project)
    async with Sandbox.create() as sb:
        result = await sb.run(
            f"ls -A {project}; cat {tasks_file}; grep -rl merge_intervals {project} | head -1"
        )
        assert "No such file or directory" in result.output
        assert '"returns"' not in result.output and "[[1, 6], [8, 10], [15, 18]]" not in result.output
        assert "merge_intervals(" not in result.output  # neither the tests nor the reference solution


@needs_private_tmp
async def test_custom_hidden_path_and_a_workdir_inside_it():
    secret = Path(tempfile.mkdtemp(prefix="hermes-opd-test-", dir="/var/lib"))
    try:
        secret.chmod(0o755)
        (secret / "answers.txt").write_text("forty-two")
        limits = SandboxLimits(hide_paths=(str(secret),))
        async with Sandbox.create(limits, root_dir=secret / "sandboxes") as sb:
            result = await sb.run(f"cat {secret}/answers.txt; ls -A {secret}; echo x > f && cat f && pwd")
            assert "forty-two" not in result.output
            assert result.output.split()[-2:] == ["x", str(sb.workdir)]
            assert (sb.workdir / "f").read_text() == "x\n"
    finally:
        shutil.rmtree(secret, ignore_errors=True)


async def test_timeout_kills_the_whole_group_and_directory_is_removed():
    async with Sandbox.create(SandboxLimits(command_timeout_s=1)) as sb:
        start = time.monotonic()
        result = await sb.run("sleep 91.1101 & sleep 91.1102; echo never")
        assert result.timed_out and result.exit_code == 124
        assert time.monotonic() - start < 5
        assert "never" not in result.output
        assert "timed out after 1s" in result.output
        assert await wait_until(lambda: not processes_matching("91.110"), 3)
        workdir = sb.workdir
    assert not workdir.exists()


async def test_per_call_timeout_overrides_default():
    async with Sandbox.create(SandboxLimits(command_timeout_s=30)) as sb:
        result = await sb.run("sleep 5", timeout_s=0.5)
        assert result.timed_out and result.duration_s < 3


@needs_pidns
async def test_background_processes_die_with_their_command():
    async with Sandbox.create() as sb:
        result = await sb.run(
            "sleep 92.2201 & setsid sleep 92.2202 & nohup sleep 92.2203 >/dev/null 2>&1 & echo started"
        )
        assert result.output.strip() == "started" and not result.timed_out
        assert await wait_until(lambda: not processes_matching("92.220"), 3), processes_matching("92.220")


async def test_cancellation_mid_command_kills_process_and_removes_directory():
    seen: dict[str, Path] = {}

    async def rollout() -> None:
        async with Sandbox.create() as sb:
            seen["workdir"] = sb.workdir
            await sb.run("sleep 93.3301")

    task = asyncio.create_task(rollout())
    assert await wait_until(lambda: bool(processes_matching("93.3301")), 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await wait_until(lambda: not processes_matching("93.3301"), 3)
    assert not seen["workdir"].exists()
    assert not [c for c in my_children() if c[1] == "Z"]


async def test_cancelled_while_its_directories_are_being_made_leaves_nothing(monkeypatch, tmp_path):
    import environments.rollout.sandbox.sandbox as sandbox_module

    made = sandbox_module._make_dirs
    started, finished = [], []

    def slow_make_dirs(*args, **kwargs):
        started.append(True)
        time.sleep(0.3)  # the thread goes on after the opener is cancelled
        try:
            return made(*args, **kwargs)
        finally:
            finished.append(True)

    monkeypatch.setattr(sandbox_module, "_make_dirs", slow_make_dirs)
    task = asyncio.create_task(Sandbox.open(root_dir=tmp_path))
    assert await wait_until(lambda: bool(started), 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    left = lambda: [p.name for p in tmp_path.iterdir() if p.name.startswith("hermes-sbx-")]  # noqa: E731
    assert await wait_until(lambda: finished and not left(), 5), left()


async def test_cancelled_while_closing_then_swept_still_removes_the_directory(monkeypatch, tmp_path):
    """A rollout stopped while it closes its sandbox, then every other task of the loop cancelled
    (the CLI's stop sweep; asyncio.run's last one): the directory is gone all the same."""
    closing = asyncio.Event()
    close = Sandbox.close

    async def announced_close(self):
        closing.set()
        await close(self)

    monkeypatch.setattr(Sandbox, "close", announced_close)

    async def rollout() -> None:
        async with Sandbox.create(root_dir=tmp_path):
            pass

    task = asyncio.create_task(rollout())
    await closing.wait()
    task.cancel()
    sweep_done = asyncio.Event()

    async def sweep() -> None:  # once the rollout has ended, as the stop handler's second sweep
        await asyncio.wait({task})
        others = {t for t in asyncio.all_tasks() if t not in (asyncio.current_task(), main)}
        for t in others:
            t.cancel()
        await asyncio.wait(others or {asyncio.ensure_future(asyncio.sleep(0))})
        sweep_done.set()

    main = asyncio.current_task()
    sweeper = asyncio.create_task(sweep())
    with pytest.raises(asyncio.CancelledError):
        await task
    await sweep_done.wait()
    await sweeper
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("hermes-sbx-")] == []


HOLDER = """
import asyncio, sys
from environments.rollout.sandbox.sandbox import Sandbox
async def main():
    sandbox = await Sandbox.open(root_dir=sys.argv[1])
    command = asyncio.ensure_future(sandbox.run("sleep 96.4412 & sleep 96.4413", timeout_s=300))
    await asyncio.sleep(0.5)
    print("ready", flush=True)
    await command
asyncio.run(main())
"""


async def test_a_killed_env_leaves_no_command_running(tmp_path):
    """SIGKILL gives the env no chance to clean up: its sandboxed commands die with it anyway (the
    parent-death signal), and the next start's reap removes the directory."""
    holder = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        HOLDER,
        str(tmp_path),
        stdout=asyncio.subprocess.PIPE,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert (await asyncio.wait_for(holder.stdout.readline(), 60)) == b"ready\n"
    assert await wait_until(lambda: len(processes_matching("sleep 96.441")) >= 2, 5)
    holder.kill()
    await holder.wait()
    assert await wait_until(lambda: not processes_matching("96.441"), 5), processes_matching("96.441")
    assert [p.name for p in reap_stale(tmp_path)] != []
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("hermes-sbx-")]


async def test_exception_inside_block_still_cleans_up():
    with pytest.raises(RuntimeError, match="boom"):
        async with Sandbox.create() as sb:
            workdir = sb.workdir
            await sb.run("echo x > file")
            raise RuntimeError("boom")
    assert not workdir.exists()


async def test_close_waits_for_offloaded_work_that_uses_the_directory():
    sb = await Sandbox.open()
    await sb.run("touch here.txt")
    seen: dict[str, list[str]] = {}

    def slow(dir_fd: int) -> None:
        time.sleep(0.3)
        seen["listing"] = os.listdir(dir_fd)

    task = asyncio.create_task(sb.offload(slow, sb.dir_fd))
    await asyncio.sleep(0.05)
    task.cancel()  # the caller gives up; the thread goes on
    await sb.close()  # ... and the descriptor stays valid until it is done
    assert seen["listing"] == ["here.txt"]
    assert not sb.workdir.exists()


async def test_closed_sandbox_refuses_commands():
    async with Sandbox.create() as sb:
        pass
    with pytest.raises(SandboxError, match="closed"):
        await sb.run("true")


async def test_memory_limit_blocks_large_allocation_but_python_starts():
    async with Sandbox.create(SandboxLimits(memory_mb=512)) as sb:
        ok = await sb.run("python3 -c pass")
        assert ok.exit_code == 0, ok.output
        big = await sb.run("python3 -c 'b = bytearray(4 * 1024**3); print(len(b))'")
        assert big.exit_code != 0
        assert "MemoryError" in big.output


async def test_file_size_limit_cuts_a_2gb_write():
    async with Sandbox.create(SandboxLimits(file_size_mb=8)) as sb:
        result = await sb.run("head -c 2G /dev/zero > big.bin; echo status=$?")
        size = (sb.workdir / "big.bin").stat().st_size
        assert size <= 8 * 1024 * 1024
        assert "status=0" not in result.output
        assert "File size limit exceeded" in result.output


@needs_netns
async def test_no_network_even_to_a_host_loopback_server():
    connections = 0

    async def on_connect(reader, writer):
        nonlocal connections
        connections += 1
        writer.close()

    server = await asyncio.start_server(on_connect, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        async with Sandbox.create() as sb:
            code = f"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=3); print('connected')"
            result = await sb.run(f'python3 -c "{code}"')
        assert result.exit_code != 0
        assert "connected" not in result.output
        assert "Network is unreachable" in result.output or "refused" in result.output
        assert connections == 0
    finally:
        server.close()
        await server.wait_closed()


async def test_environment_is_an_allow_list(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-secret-value")
    monkeypatch.setenv("WANDB_API_KEY", "wandb-secret-value")
    async with Sandbox.create(SandboxLimits(extra_env={"TASK_MODE": "eval"})) as sb:
        result = await sb.run("env; cat /proc/self/environ | tr '\\0' '\\n'")
        assert "secret-value" not in result.output
        env = dict(line.split("=", 1) for line in result.output.splitlines() if "=" in line)
        assert env["HOME"] == str(sb.workdir)
        assert env["PATH"] == "/usr/local/bin:/usr/bin:/bin"
        assert env["TASK_MODE"] == "eval"
        assert "OPENAI_API_KEY" not in env


async def test_two_sandboxes_do_not_collide():
    async with Sandbox.create() as a, Sandbox.create() as b:
        assert a.workdir != b.workdir
        await asyncio.gather(a.run("echo from-a > same.txt"), b.run("echo from-b > same.txt"))
        ra, rb = await asyncio.gather(a.run("cat same.txt"), b.run("cat same.txt"))
        assert ra.output.strip() == "from-a"
        assert rb.output.strip() == "from-b"


async def test_infinite_output_is_truncated_with_marker_and_killed():
    limits = SandboxLimits(max_output_bytes=4000, kill_output_bytes=2_000_000, command_timeout_s=20)
    async with Sandbox.create(limits) as sb:
        start = time.monotonic()
        result = await sb.run("yes hermes")
        assert time.monotonic() - start < 10
        assert result.truncated and not result.timed_out
        assert "[... output truncated:" in result.output
        assert "output exceeded 2000000 bytes" in result.output
        assert len(result.output) < 4000 + 300


async def test_long_output_keeps_head_and_tail():
    async with Sandbox.create(SandboxLimits(max_output_bytes=1000)) as sb:
        result = await sb.run("seq 1 100000")
        assert result.exit_code == 0 and result.truncated
        assert result.output.startswith("1\n2\n3\n")
        assert result.output.rstrip().endswith("99999\n100000")
        assert "bytes omitted" in result.output


async def test_binary_output_is_decoded_with_replacement():
    async with Sandbox.create() as sb:
        result = await sb.run("printf 'ok \\377\\376 done'")
        assert result.output == "ok \ufffd\ufffd done"


async def test_stdin_is_delivered_then_closed():
    async with Sandbox.create() as sb:
        result = await sb.run("wc -c; cat", stdin=b"x" * 200_000)
        assert result.output.split()[0] == "200000"
        result = await sb.run("cat")  # no stdin given: /dev/null, so it ends at once
        assert result.exit_code == 0 and result.output == ""


async def test_killed_by_signal_uses_shell_exit_convention():
    async with Sandbox.create() as sb:
        result = await sb.run("python3 -c 'import os, signal; os.kill(os.getpid(), signal.SIGTERM)'")
        assert result.exit_code == 128 + 15


async def test_no_zombies_or_children_left_behind():
    # Children that existed before (e.g. a session-wide vLLM server started by a fixture) are not ours.
    before = {pid for pid, _ in my_children()}
    limits = SandboxLimits(command_timeout_s=0.5, kill_output_bytes=100_000)
    async with Sandbox.create(limits) as sb:
        await asyncio.gather(
            sb.run("true"),
            sb.run("sleep 5"),
            sb.run("yes"),
            sb.run("sleep 94.4401 &"),
            sb.run("exit 7"),
        )
    assert await wait_until(lambda: not [c for c in my_children() if c[0] not in before], 3), my_children()


async def test_many_concurrent_commands_do_not_block_the_event_loop():
    async with Sandbox.create() as sb:
        ticks = 0

        async def ticker():
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1

        ticking = asyncio.create_task(ticker())
        results = await asyncio.gather(*(sb.run(f"sleep 0.5; echo {i}") for i in range(8)))
        ticking.cancel()
        assert [r.output.strip() for r in results] == [str(i) for i in range(8)]
        assert ticks >= 20  # the loop kept running while commands ran
