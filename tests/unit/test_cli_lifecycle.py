"""The env's life under atroposlib's CLI (environments/atropos/cli_lifecycle.py), without a server:
a SIGTERM that lands mid-rollout stops the run and leaves no sandbox behind, and a Ctrl-C stops it
even when an await swallows the first cancellation."""

from __future__ import annotations

import asyncio
import os
import signal
import time

import pytest

from environments.atropos.cli_lifecycle import CliLifecycleMixin
from environments.rollout.sandbox.disk import leftover_containers
from environments.rollout.sandbox.sandbox import Sandbox


class ServeWorker(CliLifecycleMixin):
    """What `serve` runs, reduced to its shape: rollout tasks in `workers`, each in a sandbox."""

    cli_mode = "serve"

    def __init__(self, rollouts: int) -> None:
        self.rollouts = rollouts
        self.workers: set[asyncio.Task] = set()
        self.closed = False
        self.sandboxes_open = 0

    async def rollout(self, started: asyncio.Event) -> None:
        """Sandboxes opened and closed back to back (a rollout, then its verification, then the
        next rollout): the SIGTERM finds some of them half-opened or half-closed."""
        while True:
            async with Sandbox.create():
                self.sandboxes_open += 1
                if self.sandboxes_open >= 4 * self.rollouts:
                    started.set()
                await asyncio.sleep(0)

    async def main(self) -> None:
        async with self._closing_at_exit():
            started = asyncio.Event()
            self.workers = {asyncio.create_task(self.rollout(started)) for _ in range(self.rollouts)}
            await started.wait()
            os.kill(os.getpid(), signal.SIGTERM)  # what `kill <worker pid>` does
            await asyncio.sleep(60)

    async def close(self) -> None:
        self.closed = True


@pytest.mark.reliability
def test_sigterm_mid_rollout_removes_every_sandbox():
    mine = float("inf")  # only containers whose owner record names this process
    before = set(leftover_containers(os.getpid(), mine))
    worker = ServeWorker(rollouts=8)
    with pytest.raises(asyncio.CancelledError):
        asyncio.run(worker.main())
    assert type(worker).stopped_by == "SIGTERM"
    assert worker.closed
    assert set(leftover_containers(os.getpid(), mine)) - before == set()


class SwallowingWorker(CliLifecycleMixin):
    """A run whose await swallows the first cancellation, as a timeout-and-retry wrapper does."""

    cli_mode = "serve"

    def __init__(self) -> None:
        self.swallowed = 0
        self.closed = False

    async def main(self) -> None:
        async with self._closing_at_exit():
            os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C
            for _ in range(2):
                try:
                    await asyncio.sleep(5)
                except asyncio.CancelledError:
                    if self.swallowed:
                        raise
                    self.swallowed += 1  # turned into a retry: the run goes on

    async def close(self) -> None:
        self.closed = True


def test_ctrl_c_stops_the_run_even_when_an_await_swallows_the_first_cancellation():
    worker = SwallowingWorker()
    started = time.monotonic()
    with pytest.raises(asyncio.CancelledError):  # before: the run went on and returned after 5 s
        asyncio.run(worker.main())
    assert time.monotonic() - started < 4
    assert (type(worker).stopped_by, worker.swallowed, worker.closed) == ("SIGINT", 1, True)
