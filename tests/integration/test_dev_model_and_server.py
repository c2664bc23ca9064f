"""The dev model builds reproducibly with a tool-aware ChatML template; the dev server CLI starts a
real vLLM, prints its URL and leaves nothing behind on SIGTERM/SIGINT.
The tests of its parts that need no server: tests/unit/test_dev_model.py."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.support.waiting import wait_until


def _group_alive(pgid: int) -> bool:
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if os.getpgid(int(entry.name)) == pgid:
                    stat = (entry / "stat").read_text()
                    if stat.rsplit(")", 1)[1].split()[0] != "Z":
                        return True
            except (ProcessLookupError, FileNotFoundError, PermissionError):
                continue
    return False


@pytest.mark.integration
@pytest.mark.parametrize("sig", [signal.SIGTERM])
def test_dev_server_cli_serves_and_stops_cleanly(dev_model_dir, tmp_path, sig):
    from hermes_opd.runtime.server_process import free_port

    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "hermes_opd.commands.main",
            "dev-server",
            "--model",
            str(dev_model_dir),
            "--port",
            str(port),
            "--log",
            str(tmp_path / "vllm.log"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 300
        line = ""
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if "vLLM ready" in line or proc.poll() is not None:
                break
        assert f"base_url=http://127.0.0.1:{port}/v1" in line, line
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=30) as response:
            assert json.loads(response.read())["data"][0]["id"] == "dev-model"
        vllm_pgid = int(line.split("pid=")[1].split()[0])
        proc.send_signal(sig)
        assert proc.wait(timeout=60) == 0
        wait_until(lambda: not _group_alive(vllm_pgid), 10, "vLLM processes survived the shutdown")
        with pytest.raises(OSError):
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
