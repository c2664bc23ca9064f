"""The one server lifecycle (hermes_opd/runtime/server_process.py): start a process group with its
log, wait for health, say why a start failed from the log's tail, and stop the group: SIGTERM, then
SIGKILL after the grace, helpers included."""

from __future__ import annotations

import sys
import time

import pytest

from hermes_opd.runtime.processes import pid_alive
from hermes_opd.runtime.server_process import (
    ServerStartError,
    free_port,
    log_tail,
    start_process_group,
    stop_process_group,
    wait_healthy,
)


def test_a_server_comes_up_healthy_and_its_group_goes_down(tmp_path):
    port = free_port()
    log = tmp_path / "server.log"
    server = start_process_group(
        [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"], log, cwd=tmp_path
    )
    try:
        wait_healthy(
            server, f"http://127.0.0.1:{port}/", what="http.server", timeout_s=30, log_path=log, poll_s=0.1
        )
    finally:
        stop_process_group(server, grace_s=5)
    assert server.returncode is not None and not pid_alive(server.pid)


def test_a_server_that_exits_at_startup_is_named_with_its_log(tmp_path):
    log = tmp_path / "boom.log"
    code = "import sys; print('line one'); print('the real reason'); sys.exit(3)"
    proc = start_process_group([sys.executable, "-c", code], log)
    with pytest.raises(
        ServerStartError, match=r"(?s)boom exited with code 3 during startup.*the real reason"
    ):
        wait_healthy(
            proc, f"http://127.0.0.1:{free_port()}/", what="boom", timeout_s=30, log_path=log, poll_s=0.05
        )
    assert log_tail(log, 1) == "the real reason"
    assert log_tail(tmp_path / "none.log") == "(no log)"


def test_a_server_deaf_to_sigterm_and_its_helper_are_killed_after_the_grace(tmp_path):
    helper_pid = tmp_path / "helper.pid"
    code = (
        "import signal, subprocess, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "h = subprocess.Popen([sys.executable, '-c', 'import signal, time; signal.signal(signal.SIGTERM, "
        f"signal.SIG_IGN); time.sleep(60)']); open({str(helper_pid)!r}, 'w').write(str(h.pid)); time.sleep(60)"
    )
    proc = start_process_group([sys.executable, "-c", code], None)
    deadline = time.monotonic() + 20
    while not (helper_pid.exists() and helper_pid.read_text()) and time.monotonic() < deadline:
        time.sleep(0.05)
    started = time.monotonic()
    stop_process_group(proc, grace_s=0.5)
    assert 0.4 < time.monotonic() - started < 15
    assert proc.returncode == -9
    pid = int(helper_pid.read_text())
    deadline = time.monotonic() + 5
    while pid_alive(pid) and time.monotonic() < deadline:  # a zombie until init reaps it
        time.sleep(0.05)
    with open(f"/proc/{pid}/stat") if pid_alive(pid) else open("/dev/null") as stat:
        assert stat.read().split(") ")[-1][:1] in ("", "Z")
