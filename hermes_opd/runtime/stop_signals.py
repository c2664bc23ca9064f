"""Stop handling, written once: what SIGINT (Ctrl-C) and SIGTERM (`kill`, schedulers) do to a
command while it holds something that must be let go (sessions, a groups file, a vLLM it started).

- `StopSignals(on_stop)`: while installed (`install()`/`uninstall()`, or `with`), SIGINT and SIGTERM
  call `on_stop(sig)` instead of stopping the process. Installed in a coroutine (an event loop runs
  in this thread), through the loop (`loop.add_signal_handler`): `on_stop` runs between two steps of
  the loop, and may set an `asyncio.Event` or cancel a task (`hermes-opd process`, `proxy`, the env's
  CLI). Installed in sync code, as a plain signal handler (`hermes-opd dev-server` sets a flag that
  its wait loop reads).
- `sigterm_exits()`: in a sync command, SIGTERM raises `SystemExit(143)` as Ctrl-C raises
  `KeyboardInterrupt`, so that the `finally` blocks run and stop, by PID, the servers the command
  started (`hermes-opd demo`, `hermes-opd bench`).

Uninstalled, each signal gets back the handler it had before, except SIGINT after a coroutine's
install: that one is Python's `KeyboardInterrupt`, as asyncio leaves it (a second Ctrl-C during the
clean-up that follows interrupts it). So a `sigterm_exits()` around an `asyncio.run` whose coroutine
uses `StopSignals` is in force again when that coroutine lets go of SIGTERM.

Outside the main thread (where Python allows no signal handler) neither does anything. Exit codes:
`hermes_opd.runtime.exit_codes`.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import threading
from collections.abc import Callable, Iterable
from typing import Any

from hermes_opd.runtime.exit_codes import EXIT_SIGTERM

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class StopSignals:
    """Route `signals` (default SIGINT and SIGTERM) to `on_stop(sig)` while installed."""

    def __init__(
        self, on_stop: Callable[[signal.Signals], Any], signals: Iterable[signal.Signals] = STOP_SIGNALS
    ) -> None:
        self.on_stop = on_stop
        self.signals = tuple(signals)
        self._previous: dict[signal.Signals, Any] = {}
        self._loop: asyncio.AbstractEventLoop | None = None

    def install(self) -> StopSignals:
        if self._previous or threading.current_thread() is not threading.main_thread():
            return self
        try:
            self._loop = asyncio.get_running_loop()
        except RuntimeError:
            self._loop = None
        for sig in self.signals:
            previous = signal.getsignal(sig)
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                if self._loop is not None:
                    self._loop.add_signal_handler(sig, self.on_stop, sig)
                else:
                    signal.signal(sig, self._handler)
                self._previous[sig] = previous
        return self

    def uninstall(self) -> None:
        for sig, previous in self._previous.items():
            if self._loop is not None:
                with contextlib.suppress(Exception):
                    self._loop.remove_signal_handler(sig)  # SIGINT: KeyboardInterrupt, SIGTERM: SIG_DFL
                if sig == signal.SIGINT:
                    continue
            with contextlib.suppress(Exception):
                signal.signal(sig, previous)
        self._previous.clear()
        self._loop = None

    def _handler(self, signum: int, _frame: Any) -> None:
        self.on_stop(signal.Signals(signum))

    def __enter__(self) -> StopSignals:
        return self.install()

    def __exit__(self, *exc: object) -> None:
        self.uninstall()


def sigterm_exits(code: int = EXIT_SIGTERM) -> StopSignals:
    """`with sigterm_exits():` in a sync command: SIGTERM raises `SystemExit(code)` inside the block."""

    def exit_now(_sig: signal.Signals) -> None:
        raise SystemExit(code)

    return StopSignals(exit_now, signals=(signal.SIGTERM,))
