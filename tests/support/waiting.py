"""Wait for a condition: return as soon as it holds, fail after a bound (no fixed sleeps).

The tests wait on what they wait for (a file's line count, a registration, a process gone) through
these, so that a test is as fast as the thing it waits on and a hang fails with what it waited for.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

POLL_S = 0.02
"""How often a condition is looked at: short, since each look is cheap."""


def wait_until(
    condition: Callable[[], object],
    timeout_s: float,
    what: str = "the condition did not hold",
    *,
    alive: Callable[[], object] | None = None,
    interval_s: float = POLL_S,
) -> None:
    """Return as soon as `condition()` is true; fail with `what` after `timeout_s`, or at once when
    `alive()` (the process or thread that should make it true) turns false."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert alive is None or alive(), f"{what} (what should make it true has stopped)"
        assert time.monotonic() < deadline, f"{what} (after {timeout_s:g} s)"
        time.sleep(interval_s)


async def wait_for(
    condition: Callable[[], object],
    timeout_s: float = 120.0,
    what: str = "timed out waiting",
    *,
    interval_s: float = POLL_S,
) -> None:
    """`wait_until` for a test running in an event loop: the loop goes on while it waits."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} (after {timeout_s:g} s)")
        await asyncio.sleep(interval_s)
