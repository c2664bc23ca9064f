"""The one `run-api` launcher (hermes_opd/devkit/run_api.py): up on a free port, emptied by `reset`,
back on the same port after a stop, and a start that cannot bind says why and leaves nothing."""

from __future__ import annotations

import socket

import httpx
import pytest

from hermes_opd.devkit.run_api import RunApi, RunApiError, running_run_api

REGISTRATION = {
    "wandb_group": "t",
    "wandb_project": "t",
    "batch_size": 2,
    "max_token_len": 64,
    "checkpoint_dir": "/tmp/unused",
    "save_checkpoint_interval": -1,
    "starting_step": 0,
    "num_steps": 1,
}


def test_reset_forgets_the_trainer_and_a_restart_keeps_the_port(tmp_path):
    with running_run_api(tmp_path / "api.log") as api:
        assert api.url == f"http://127.0.0.1:{api.port}"
        httpx.post(f"{api.url}/register", json=REGISTRATION, timeout=10).raise_for_status()
        assert httpx.get(f"{api.url}/info", timeout=10).json()["batch_size"] == 2
        api.reset()
        assert httpx.get(f"{api.url}/info", timeout=10).json()["batch_size"] == -1
        pid, port = api.process.pid, api.port
        api.stop()
        assert api.process is None
        with pytest.raises(httpx.TransportError):
            httpx.get(f"{api.url}/status", timeout=2)
        api.start()
        assert api.port == port and api.process.pid != pid
        assert httpx.get(f"{api.url}/status", timeout=10).status_code == 200
    assert api.process is None


def test_a_taken_port_fails_with_the_log_and_leaves_no_process(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        api = RunApi(port=taken.getsockname()[1], log_path=str(tmp_path / "api.log"), startup_timeout_s=30)
        with pytest.raises(RunApiError, match="run-api exited"):
            api.start()
    assert api.process is None
