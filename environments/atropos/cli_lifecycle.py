"""The env's life under atroposlib's CLI: every entry point closes the env's sessions at the end.

atroposlib 0.4.0 runs each subcommand as one coroutine under `asyncio.run`: `serve` runs
`env_manager()`, `process` runs `process_manager()`, `evaluate` runs `_run_evaluate()`. It never calls
`close()`, so the aiohttp sessions of the policy client, the judge and the teacher were left open
and Python printed `Unclosed client session` / `Unclosed connector` at exit. `CliLifecycleMixin`
wraps those three coroutines in `try/finally: await self.close()`, which runs:

- on a normal return;
- on an error (the exception goes on to the CLI's error handler after the sessions are closed);
- on Ctrl-C and SIGTERM, when run from the CLI (`cli_mode` set): the handler cancels the main task,
  and again every second until its `finally` has begun (a cancellation can be swallowed by an await
  that turns it into a timeout and retries); the `finally` runs inside the loop, then the CLI exits
  130 (SIGINT) or 143 (SIGTERM). A second Ctrl-C during the clean-up is Python's own
  `KeyboardInterrupt` (exit 130). Outside the CLI, Ctrl-C is `asyncio.run`'s: one cancellation.

Before `close()`, the env's own tasks (rollout workers, evals; under the CLI every task of the loop)
are cancelled and awaited, so that none opens a new session after it.

`_run_evaluate` also times the evaluation and prints the short table of `environments.atropos.eval_report`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import sys
import time
from pathlib import Path
from typing import Any, ClassVar, TextIO

from environments.atropos.eval_report import EvalReport, format_eval_report
from hermes_opd.runtime.stop_signals import StopSignals

logger = logging.getLogger(__name__)

STOP_RECANCEL_S = 1.0
"""After SIGINT or SIGTERM, the run is cancelled again this often until its clean-up begins."""
STOP_TIMEOUT_S = 30.0
"""How long the env's cancelled tasks get to finish (sandbox clean-up) before the sessions close."""


class CliLifecycleMixin:
    """Put first in the bases of a `BaseEnv` subclass that has an async `close()`."""

    cli_mode: ClassVar[str | None] = None
    """'serve', 'process' or 'evaluate' on the per-command classes `environments.atropos.cli` builds."""
    report_stream: ClassVar[TextIO | None] = None
    """Where `_run_evaluate` prints its table (None: sys.stdout)."""
    stopped_by: ClassVar[str | None] = None
    """'SIGTERM' or 'SIGINT' once that signal's handler has cancelled the run (the CLI's exit code)."""
    _closing: bool = False
    """True once the run's clean-up has begun: the stop handler stops cancelling."""

    async def env_manager(self):
        async with self._closing_at_exit():
            return await super().env_manager()

    async def process_manager(self):
        async with self._closing_at_exit():
            try:
                return await super().process_manager()
            finally:
                writer = getattr(self, "jsonl_writer", None)
                if writer is not None:  # process_manager closes it only when every group succeeded
                    writer.close()

    async def _run_evaluate(self):
        async with self._closing_at_exit():
            started = time.monotonic()
            await self.setup()
            setup_s = time.monotonic() - started
            metrics = await self.evaluate()
            elapsed = time.monotonic() - started
            print(
                format_eval_report(self.eval_report(metrics, elapsed - setup_s)),
                file=self.report_stream or sys.stdout,
                flush=True,
            )
            return metrics

    def eval_report(self, metrics: dict[str, float], elapsed_s: float) -> EvalReport:
        config: Any = self.config
        servers = getattr(getattr(self, "server", None), "servers", None) or []
        policy = getattr(servers[0], "config", None) if servers else None
        eval_dir = getattr(config, "data_dir_to_save_evals", None)
        return EvalReport(
            env_name=getattr(self, "name", None) or type(self).__name__,
            metrics=dict(metrics),
            elapsed_s=elapsed_s,
            metrics_path=Path(self._metrics_path()),
            eval_log_path=Path(eval_dir) / "metrics.json" if eval_dir else None,
            model=getattr(policy, "model_name", None),
            base_url=getattr(policy, "base_url", None),
        )

    @contextlib.asynccontextmanager
    async def _closing_at_exit(self):
        task = asyncio.current_task()
        self._closing = False
        stop_signals = StopSignals(lambda sig: self._on_stop_signal(sig, task))
        if self.cli_mode is not None and task is not None:
            stop_signals.install()
        try:
            yield
        finally:
            self._closing = True
            stop_signals.uninstall()  # from here a second Ctrl-C is Python's own KeyboardInterrupt
            await self._stop_background_tasks(task)
            try:
                await self.close()
            except Exception:  # noqa: BLE001 - closing must not hide the run's own outcome
                logger.warning("closing the env failed", exc_info=True)

    async def _stop_background_tasks(self, current: asyncio.Task | None) -> None:
        """Cancel the env's rollout and eval tasks, and wait for them, before `close()`: one still
        running after it would open a new HTTP session that nobody closes. Under the CLI (the loop
        is this run's alone) every other task of the loop goes too, but only AFTER the env's own
        tasks have finished: cancelled once, a rollout removes its sandbox in a shielded task;
        cancelling that task too (or a sandbox's directory maker) in the same sweep left sandboxes
        on disk until the next start."""
        own = {*getattr(self, "workers", ()), *getattr(self, "eval_workers", ())}
        runner = getattr(self, "eval_runner", None)
        if runner is not None:
            own.add(runner)
        deadline = time.monotonic() + STOP_TIMEOUT_S  # one budget for both sweeps
        await self._cancel_and_wait(own, current, deadline)
        if self.cli_mode is not None:
            await self._cancel_and_wait(asyncio.all_tasks(), current, deadline)

    @staticmethod
    async def _cancel_and_wait(
        tasks: set[asyncio.Task], current: asyncio.Task | None, deadline: float
    ) -> None:
        tasks = {t for t in tasks if t is not current and not t.done()}
        for t in tasks:
            t.cancel()
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=max(0.0, deadline - time.monotonic()))
            if pending:
                logger.warning("%d task(s) still running %.0f s after cancel", len(pending), STOP_TIMEOUT_S)

    def _on_stop_signal(self, sig: signal.Signals, task: asyncio.Task) -> None:
        type(self).stopped_by = sig.name
        logger.warning("%s: stopping, closing the env's connections", sig.name)
        self._cancel_until_closing(task)

    def _cancel_until_closing(self, task: asyncio.Task) -> None:
        """Cancel the run, and again every STOP_RECANCEL_S until its clean-up has begun. One
        cancellation is not enough: an await that turns it into a timeout and retries swallows it,
        and the serve loop then runs on (seen in CI: still serving 120 s after Ctrl-C)."""
        if task.done() or self._closing:
            return
        task.cancel()
        asyncio.get_running_loop().call_later(STOP_RECANCEL_S, self._cancel_until_closing, task)

    @classmethod
    def cli(cls) -> None:
        """`python -m <module> serve|process|evaluate ...`: atroposlib's CLI, with one-line errors."""
        from environments.atropos.cli import run_cli

        sys.exit(run_cli(cls))
