"""Stop handling written once (hermes_opd/runtime/stop_signals.py), checked with real signals: to
a child process (exit 143 / 130, its `finally` ran) and to this process, with a safe handler in
place before and checked to be back after."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from hermes_opd.runtime.exit_codes import EXIT_SIGINT, EXIT_SIGTERM
from hermes_opd.runtime.stop_signals import StopSignals, sigterm_exits

REPO = Path(__file__).resolve().parents[2]

SYNC_COMMAND = textwrap.dedent(
    """
    import pathlib, sys, time
    from hermes_opd.runtime.exit_codes import EXIT_SIGINT
    from hermes_opd.runtime.stop_signals import sigterm_exits

    marker = pathlib.Path(sys.argv[1])
    try:
        with sigterm_exits():
            try:
                print("ready", flush=True)
                time.sleep(60)
            finally:
                marker.write_text("cleaned up")  # where a command stops the servers it started
    except KeyboardInterrupt:
        sys.exit(EXIT_SIGINT)
    """
)


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGTERM, EXIT_SIGTERM), (signal.SIGINT, EXIT_SIGINT)])
def test_a_sync_command_unwinds_through_finally_on_a_real_signal(tmp_path, sig, code):
    marker = tmp_path / "cleanup"
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    proc = subprocess.Popen(
        [sys.executable, "-c", SYNC_COMMAND, str(marker)],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout.readline().strip() == "ready"
        proc.send_signal(sig)
        _, stderr = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == code, stderr
    assert marker.read_text() == "cleaned up"


@pytest.fixture
def safe_handlers():
    """SIGINT and SIGTERM to this process land in `caught` unless a test's handler takes them."""
    caught: list[int] = []

    def catch(signum, _frame):
        caught.append(signum)

    previous = {sig: signal.signal(sig, catch) for sig in (signal.SIGINT, signal.SIGTERM)}
    yield catch, caught
    for sig, handler in previous.items():
        signal.signal(sig, handler)


def _wait_until(condition, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)


def test_sync_install_calls_on_stop_and_restores_both_handlers(safe_handlers):
    """`hermes-opd dev-server`: a flag its wait loop reads."""
    catch, caught = safe_handlers
    seen: list[signal.Signals] = []
    with StopSignals(seen.append):
        os.kill(os.getpid(), signal.SIGINT)
        os.kill(os.getpid(), signal.SIGTERM)
        _wait_until(lambda: len(seen) == 2)
    assert seen == [signal.SIGINT, signal.SIGTERM] and not caught
    assert signal.getsignal(signal.SIGINT) is catch and signal.getsignal(signal.SIGTERM) is catch


def test_in_a_coroutine_on_stop_runs_in_the_loop(safe_handlers):
    """`hermes-opd process`, `proxy`, the env's CLI: an asyncio.Event set by the signal. After it,
    SIGTERM gets its handler back and SIGINT is Python's KeyboardInterrupt, as asyncio leaves it."""
    catch, caught = safe_handlers

    async def job() -> list[signal.Signals]:
        stop = asyncio.Event()
        seen: list[signal.Signals] = []

        def on_stop(sig: signal.Signals) -> None:
            seen.append(sig)
            stop.set()

        with StopSignals(on_stop):
            os.kill(os.getpid(), signal.SIGTERM)
            await asyncio.wait_for(stop.wait(), timeout=5)
        return seen

    assert asyncio.run(job()) == [signal.SIGTERM] and not caught
    assert signal.getsignal(signal.SIGTERM) is catch
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_sigterm_exits_is_back_in_force_after_an_asyncio_run(safe_handlers):
    """`hermes-opd demo`: SIGTERM raises SystemExit(143) around `process`'s asyncio run, which
    routes SIGTERM to its own stop handling for a while and then hands it back."""
    catch, caught = safe_handlers

    async def collect() -> list[signal.Signals]:
        seen: list[signal.Signals] = []
        with StopSignals(seen.append):
            os.kill(os.getpid(), signal.SIGTERM)
            for _ in range(500):
                if seen:
                    break
                await asyncio.sleep(0.01)
        return seen

    with sigterm_exits():
        assert asyncio.run(collect()) == [signal.SIGTERM]
        with pytest.raises(SystemExit) as exited:
            os.kill(os.getpid(), signal.SIGTERM)
            _wait_until(lambda: False, timeout_s=5)
        assert exited.value.code == EXIT_SIGTERM
    assert signal.getsignal(signal.SIGTERM) is catch and not caught
