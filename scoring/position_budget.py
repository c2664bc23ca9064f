"""A first-come-first-served budget of prompt positions in flight (pure asyncio, no I/O).

A top-K teacher response costs memory and server work in proportion to its context length (vLLM
builds and sends a row for every position, about 3.7 KB each at K = 50), not to the number of
requests: eight requests of 32k tokens hold about 1 GB of response bodies, while 32 requests of 600
tokens hold 70 MB. `PositionBudget` bounds what matters: the sum of the prompt lengths in flight.

- a request holding `n` positions waits until `n` more fit under the capacity;
- one longer than the whole capacity waits until nothing else is in flight, then runs alone;
- waiters are served in arrival order, so a long request is never starved by short ones;
- cancelling a waiter (or a holder) gives its place (or its positions) back.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncIterator


class PositionBudget:
    """At most `capacity` positions in flight; see the module docstring."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"position budget must be >= 1, got {capacity}")
        self.capacity = capacity
        self.in_use = 0
        self._waiters: deque[tuple[int, asyncio.Future[None]]] = deque()

    def _units(self, positions: int) -> int:
        if positions < 0:
            raise ValueError(f"positions must be >= 0, got {positions}")
        return min(positions, self.capacity)

    @contextlib.asynccontextmanager
    async def hold(self, positions: int) -> AsyncIterator[None]:
        """Hold `positions` (at most the capacity) for the duration of the block."""
        units = self._units(positions)
        if not self._waiters and self.in_use + units <= self.capacity:
            self.in_use += units
        else:
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            entry = (units, waiter)
            self._waiters.append(entry)
            try:
                await waiter
            except asyncio.CancelledError:
                if waiter.done() and not waiter.cancelled():
                    self.in_use -= units  # granted just as it was cancelled: give it back
                else:
                    with contextlib.suppress(ValueError):
                        self._waiters.remove(entry)
                self._admit()
                raise
        try:
            yield
        finally:
            self.in_use -= units
            self._admit()

    def _admit(self) -> None:
        while self._waiters:
            units, waiter = self._waiters[0]
            if waiter.done():  # cancelled while queued
                self._waiters.popleft()
                continue
            if self.in_use + units > self.capacity:
                return
            self._waiters.popleft()
            self.in_use += units
            waiter.set_result(None)
