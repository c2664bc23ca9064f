"""Giving the memory of finished large work back to the OS, a few seconds after it is freed.

The proxy takes bodies of up to 4 MiB, and a session can hold a long record. When a large body has
been handled or a session ends, Python frees the memory, but the C heap keeps it for reuse, so the
process would stay at its peak size for good. `FreedMemoryReturn` reads how many bytes of such work
have finished (cumulative counts kept by the body reader and the session table) and, once enough
has finished since its last return, runs `return_free_heap` (glibc's `malloc_trim`) in a worker thread:
not per request (a trim walks the whole heap), and never on the event loop."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from concurrent.futures import Executor

from hermes_opd.runtime.process_tuning import return_free_heap

logger = logging.getLogger(__name__)

RETURN_AFTER_BYTES = 8 * 1024 * 1024
"""Return the heap once this much large work (bodies, ended sessions' records) has finished."""
CHECK_EVERY_S = 2.0
BYTES_PER_HELD_TOKEN = 100
"""About what one token of a session's record costs in memory (its id, logprob, text and spans as
Python objects): how an ended session's tokens count towards `RETURN_AFTER_BYTES`."""


class FreedMemoryReturn:
    """`run` returns the heap whenever `finished()` (bytes of large work finished so far, never
    falling) has grown by `after_bytes` since the last return."""

    def __init__(
        self, executor: Executor, finished: Callable[[], int], after_bytes: int = RETURN_AFTER_BYTES
    ) -> None:
        self.executor = executor
        self.finished = finished
        self.after_bytes = after_bytes
        self.returns = 0
        self._returned_at = 0

    def due(self) -> bool:
        """Whether enough has finished since the last return (and, if so, counts it as returned)."""
        finished = self.finished()
        if finished - self._returned_at < self.after_bytes:
            return False
        self._returned_at = finished
        return True

    async def run(self, every_s: float = CHECK_EVERY_S) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(every_s)
            if not self.due():
                continue
            try:
                await loop.run_in_executor(self.executor, return_free_heap)
                self.returns += 1
            except Exception:  # noqa: BLE001 - an optimisation: log it and go on serving
                logger.warning("returning freed memory to the OS failed", exc_info=True)
