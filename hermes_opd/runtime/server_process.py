"""A server in a child process, its whole life once: start it in its own process group with its
output in a log file, wait until an HTTP health URL answers 200 (or the process exits, or time is
up), read the log's last lines for an error, and stop the process group: SIGTERM, SIGKILL after a
grace, reap, then SIGKILL whatever the group still holds (servers leave helpers). Always by the
child's PID, never by name.

Every launcher uses these: the dev vLLM and the Tinker-API server (hermes_opd/devkit/dev_server.py,
hermes_opd/devkit/tinker_server.py), atroposlib's `run-api` (hermes_opd/devkit/run_api.py) and the
learning study's proxy, trainer and env workers (hermes_opd/learning_study/loop.py, live_loop.py).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from hermes_opd.contract.errors import HermesOPDError
from hermes_opd.runtime.wait_notice import WAIT_NOTICE_S


class ServerStartError(HermesOPDError, RuntimeError):
    """A server exited during startup or did not answer its health URL in time."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_process_group(
    argv: Sequence[str],
    log_path: str | Path | None,
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | Path | None = None,
    append: bool = True,
) -> subprocess.Popen:
    """Start `argv` as the leader of its own process group (its own session), stdin closed, stdout
    and stderr into `log_path` (appended, or truncated when not `append`; discarded when None)."""
    log = open(log_path, "ab" if append else "wb") if log_path is not None else subprocess.DEVNULL  # noqa: SIM115
    try:
        return subprocess.Popen(
            list(argv),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=dict(env) if env is not None else None,
            cwd=cwd,
            start_new_session=True,
        )
    finally:
        if log is not subprocess.DEVNULL:
            log.close()


def log_tail(log_path: str | Path | None, lines: int = 30) -> str:
    """The last `lines` lines of a log file, or '(no log)'."""
    if log_path is None or not Path(log_path).exists():
        return "(no log)"
    return "\n".join(Path(log_path).read_text(errors="replace").splitlines()[-lines:])


def answers_200(url: str, timeout_s: float = 5.0) -> bool:
    """Whether `GET url` answers 200 now (no answer, or another status: False)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            return response.status == 200
    except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
        return False


def wait_healthy(
    process: subprocess.Popen,
    health_url: str,
    *,
    what: str,
    timeout_s: float,
    log_path: str | Path | None = None,
    poll_s: float = 1.0,
    on_wait: Callable[[float], None] | None = None,
    error: type[Exception] = ServerStartError,
) -> None:
    """Return once `health_url` answers 200. Raise `error` (naming `what`, with the log's last lines)
    when `process` exits first or `timeout_s` passes. `on_wait(seconds waited)` is called every
    `WAIT_NOTICE_S` while it waits."""
    started = time.monotonic()
    noticed = started
    while time.monotonic() - started < timeout_s:
        if on_wait is not None and time.monotonic() - noticed >= WAIT_NOTICE_S:
            noticed = time.monotonic()
            on_wait(noticed - started)
        if process.poll() is not None:
            raise error(
                f"{what} exited with code {process.returncode} during startup; last log lines:\n"
                f"{log_tail(log_path)}"
            )
        if answers_200(health_url, timeout_s=min(5.0, max(0.5, timeout_s))):
            return
        time.sleep(poll_s)
    raise error(f"{what} was not healthy after {timeout_s:.0f}s; last log lines:\n{log_tail(log_path)}")


def stop_process_group(process: subprocess.Popen, grace_s: float = 20.0) -> None:
    """SIGTERM the process group led by `process`, SIGKILL it after `grace_s`, reap `process`, and
    SIGKILL whatever is left in the group."""
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=10)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)


class ManagedServer:
    """What every local server wrapper shares (the dev vLLM, the Tinker-API server, atroposlib's
    run-api): its command started in its own process group, a wait for its health URL (the group stopped again if it
    never comes up), its log's tail, a stop by PID, and `with` for all of it. A subclass gives
    `health_url`, `what`, and `start`, which checks its inputs and calls `_launch`."""

    what = "the server"
    """How errors and notices name it."""
    start_error: type[Exception] = ServerStartError
    health_poll_s = 1.0
    """Seconds between two health checks while it starts."""
    stop_grace_s = 20.0
    """Seconds between SIGTERM and SIGKILL when it is stopped."""
    process: subprocess.Popen | None
    startup_timeout_s: float
    log_path: str | Path | None

    @property
    def health_url(self) -> str:
        raise NotImplementedError

    def start(self) -> ManagedServer:
        raise NotImplementedError

    def _wait_notice(self, waited_s: float) -> None:
        """Called every `WAIT_NOTICE_S` while the server is not healthy yet (nothing by default)."""

    def _launch(
        self,
        command: Sequence[str],
        log_path: str | Path | None,
        env: Mapping[str, str] | None = None,
        cwd: str | Path | None = None,
    ) -> None:
        self.process = start_process_group(command, log_path, env=env, cwd=cwd)
        try:
            self.wait_healthy()
        except BaseException:
            self.stop()
            raise

    def wait_healthy(self) -> None:
        assert self.process is not None
        wait_healthy(
            self.process,
            self.health_url,
            what=self.what,
            timeout_s=self.startup_timeout_s,
            log_path=self.log_path,
            poll_s=self.health_poll_s,
            on_wait=self._wait_notice,
            error=self.start_error,
        )

    def log_tail(self, lines: int = 30) -> str:
        return log_tail(self.log_path, lines)

    def stop(self, grace_s: float | None = None) -> None:
        """End the server's process group (SIGTERM, then SIGKILL after `grace_s`, by default
        `stop_grace_s`) and reap it."""
        process, self.process = self.process, None
        if process is not None:
            stop_process_group(process, self.stop_grace_s if grace_s is None else grace_s)

    def __enter__(self):  # noqa: ANN204 - the subclass itself
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
