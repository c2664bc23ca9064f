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
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from hermes_opd.contract.errors import HermesOPDError
from hermes_opd.devkit.dev_server import free_port, stop_process_group

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
        log = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL  # noqa: SIM115 - closed below
        try:
            self.process = subprocess.Popen(
                [str(RUN_API), "--host", "127.0.0.1", "--port", str(self.port)], cwd=self.cwd,
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
            )  # fmt: skip
        finally:
            if log is not subprocess.DEVNULL:
                log.close()
        try:
            self.wait_answering()
        except BaseException:
            self.stop()
            raise
        return self

    def wait_answering(self) -> None:
        """Return as soon as `GET /status` answers 200; raise when the process exits or time is up."""
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if self.process is None or self.process.poll() is not None:
                code = None if self.process is None else self.process.returncode
                raise RunApiError(f"run-api exited with {code}: {self.log_tail()}")
            with (
                contextlib.suppress(urllib.error.URLError, ConnectionError, OSError),
                urllib.request.urlopen(f"{self.url}/status", timeout=2) as response,
            ):
                if response.status == 200:
                    return
            time.sleep(0.05)
        raise RunApiError(f"run-api did not answer within {self.startup_timeout_s:.0f} s: {self.log_tail()}")

    def reset(self) -> None:
        """Empty it: no trainer, no envs, no queue (atroposlib's `GET /reset_data`)."""
        with urllib.request.urlopen(f"{self.url}/reset_data", timeout=10) as response:
            if response.status != 200:
                raise RunApiError(f"run-api /reset_data answered {response.status}")

    def log_tail(self, chars: int = 2000) -> str:
        if not self.log_path or not Path(self.log_path).exists():
            return "(no log)"
        return Path(self.log_path).read_text(errors="replace")[-chars:]

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
