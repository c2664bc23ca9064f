"""Wait for a condition: return as soon as it holds, fail after a bound (no fixed sleeps)."""

from __future__ import annotations

import asyncio
import time


async def wait_for(condition, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting")
        await asyncio.sleep(0.1)
