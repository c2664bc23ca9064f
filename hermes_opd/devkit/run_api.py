"""Start, health-check and stop atroposlib's API server (`run-api`) on a free loopback port.

The one launcher for the tests (a session fixture in tests/conftest.py), the benches and the demo,
beside the vLLM launcher (hermes_opd/devkit/dev_server.py). The server runs in its own process
group and is always stopped by its PID; `start()` after `stop()` brings it back on the same port
(the spool tests restart the API under a running sender).
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from hermes_opd.contract.errors import HermesOPDError
from hermes_opd.runtime.server_process import (
    free_port,
    log_tail,
    start_process_group,
    stop_process_group,
    wait_healthy,
)

RUN_API = Path(sys.executable).with_name("run-api")
"""atroposlib's console script, installed beside this interpreter."""


class RunApiError(HermesOPDError, RuntimeError):
    """`run-api` exited or did not answer in time."""


@dataclass
class RunApi:
    """`run-api` on 127.0.0.1:`port` (a free one when 0); `.url` is its root."""

    port: int = 0
    log_path: str | None = None
    """Its stdout and stderr (appended); discarded when None."""
    startup_timeout_s: float = 60.0
    cwd: str | None = None
    process: subprocess.Popen | None = field(default=None, init=False, repr=False)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> RunApi:
        if self.port == 0:
            self.port = free_port()
        self.process = start_process_group(
            [str(RUN_API), "--host", "127.0.0.1", "--port", str(self.port)], self.log_path, cwd=self.cwd
        )
        try:
            self.wait_answering()
        except BaseException:
            self.stop()
            raise
        return self

    def wait_answering(self) -> None:
        """Return as soon as `GET /status` answers 200; raise when the process exits or time is up."""
        if self.process is None:
            raise RunApiError("run-api is not started")
        wait_healthy(
            self.process,
            f"{self.url}/status",
            what="run-api",
            timeout_s=self.startup_timeout_s,
            log_path=self.log_path,
            poll_s=0.05,
            error=RunApiError,
        )

    def reset(self) -> None:
        """Empty it: no trainer, no envs, no queue (atroposlib's `GET /reset_data`)."""
        with urllib.request.urlopen(f"{self.url}/reset_data", timeout=10) as response:
            if response.status != 200:
                raise RunApiError(f"run-api /reset_data answered {response.status}")

    def log_tail(self, lines: int = 30) -> str:
        return log_tail(self.log_path, lines)

    def stop(self, grace_s: float = 10.0) -> None:
        """SIGTERM its process group, SIGKILL after `grace_s`, and reap it."""
        process, self.process = self.process, None
        if process is not None:
            stop_process_group(process, grace_s)

    def __enter__(self) -> RunApi:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


@contextlib.contextmanager
def running_run_api(log_path: str | Path | None = None, **options) -> Iterator[RunApi]:
    """A started `run-api` (its URL is `.url`), stopped by its PID when the block ends."""
    api = RunApi(log_path=None if log_path is None else str(log_path), **options)
    with api:
        yield api
