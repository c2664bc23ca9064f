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
from hermes_opd.runtime.server_process import ManagedServer, free_port

RUN_API = Path(sys.executable).with_name("run-api")
"""atroposlib's console script, installed beside this interpreter."""


class RunApiError(HermesOPDError, RuntimeError):
    """`run-api` exited or did not answer in time."""


@dataclass
class RunApi(ManagedServer):
    """`run-api` on 127.0.0.1:`port` (a free one when 0); `.url` is its root."""

    what = "run-api"
    start_error = RunApiError
    health_poll_s = 0.05
    stop_grace_s = 10.0

    port: int = 0
    log_path: str | None = None
    """Its stdout and stderr (appended); discarded when None."""
    startup_timeout_s: float = 60.0
    cwd: str | None = None
    process: subprocess.Popen | None = field(default=None, init=False, repr=False)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def health_url(self) -> str:
        return f"{self.url}/status"

    def start(self) -> RunApi:
        if self.port == 0:
            self.port = free_port()
        self._launch(
            [str(RUN_API), "--host", "127.0.0.1", "--port", str(self.port)], self.log_path, cwd=self.cwd
        )
        return self

    def reset(self) -> None:
        """Empty it: no trainer, no envs, no queue (atroposlib's `GET /reset_data`)."""
        with urllib.request.urlopen(f"{self.url}/reset_data", timeout=10) as response:
            if response.status != 200:
                raise RunApiError(f"run-api /reset_data answered {response.status}")


@contextlib.contextmanager
def running_run_api(log_path: str | Path | None = None, **options) -> Iterator[RunApi]:
    """A started `run-api` (its URL is `.url`), stopped by its PID when the block ends."""
    api = RunApi(log_path=None if log_path is None else str(log_path), **options)
    with api:
        yield api
