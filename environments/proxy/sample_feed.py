"""The proxy's background half: finished turns -> the OPD pipeline -> groups -> the sink.

Nothing here runs on a request's path. `submit` only puts a turn on a bounded queue (a full queue
drops the turn and counts it: a request never waits for training). Workers run the one OPD pipeline
(environments/pipeline/opd_pipeline.py) over each turn. A turn whose judge or teacher failed (down,
slow, 5xx) is kept and tried again with backoff until `retry_window_s` has passed, so a judge or
teacher that comes back still gets every turn, once. Scored turns are batched, per policy version,
into `ScoredDataGroup`s by the env's group builder and handed to the sink."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from environments.delivery.group_builder import FinishedRollout, build_group
from environments.pipeline.opd_config import OPDConfig
from environments.pipeline.opd_pipeline import OPDPipeline
from environments.proxy.turn_sample import TurnSample
from hermes_opd.contract.policy_version import POLICY_VERSION_KEY

logger = logging.getLogger(__name__)

RETRY_STATUSES = frozenset({"judge_error", "teacher_error", "prm_judge_error"})
"""Turn statuses that a judge or teacher that comes back can still change (`prm_`: the process judge's)."""
PROXY_KEY = "proxy"
"""Key of a sample's provenance in `overrides[seq]`: session, turn, policy version and lag."""


@dataclass
class FeedSettings:
    queue_size: int = 256
    workers: int = 4
    samples_per_group: int = 4
    group_wait_s: float = 30.0
    """A partial group is sent once its oldest sample has waited this long."""
    retry_window_s: float = 3600.0
    retry_backoff_s: float = 1.0
    retry_backoff_max_s: float = 30.0


@dataclass
class FeedStats:
    submitted: int = 0
    dropped_queue_full: int = 0
    retried: int = 0
    gave_up: int = 0
    failed: int = 0
    """Turns whose pipeline raised an unexpected error (logged with its traceback; not retried)."""
    scored_turns: int = 0
    unscored_turns: int = 0
    samples_grouped: int = 0
    groups_written: int = 0
    statuses: dict[str, int] = field(default_factory=dict)


class SampleFeed:
    """Bounded queue + workers + per-version batching."""

    def __init__(self, pipeline: OPDPipeline | None, opd: OPDConfig, write: Callable[[dict[str, Any]], Awaitable[None]],
                 settings: FeedSettings, newest_version: Callable[[], int],
                 before_process: Callable[[], Awaitable[None]] | None = None,
                 flush_sink: Callable[[], Awaitable[None]] | None = None) -> None:  # fmt: skip
        self.pipeline = pipeline
        self.opd = opd
        self.write = write
        self.settings = settings
        self.newest_version = newest_version
        self.before_process = before_process
        self.flush_sink = flush_sink
        """Called every second and at the end: a sink that keeps groups for later resends them."""
        self.queue: asyncio.Queue[TurnSample] = asyncio.Queue(maxsize=settings.queue_size)
        self.stats = FeedStats()
        self._batches: dict[int, list[tuple[float, FinishedRollout]]] = {}
        self._tasks: list[asyncio.Task] = []
        self._retry_tasks: set[asyncio.Task] = set()
        self._busy = 0
        self._batch_lock = asyncio.Lock()
        self._effective_sessions: set[str] = set()
        """Sessions that already have a process-reward turn that trains (at least one per session)."""

    # -- lifecycle -----------------------------------------------------------------------------
    def start(self) -> None:
        self._tasks = [asyncio.create_task(self._worker()) for _ in range(self.settings.workers)]
        self._tasks.append(asyncio.create_task(self._flush_old_batches()))

    async def stop(self, drain_s: float = 30.0) -> None:
        """Score what is queued (up to `drain_s`), write every batch, partial ones included."""
        deadline = time.monotonic() + drain_s
        while (not self.queue.empty() or self._busy) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        for task in [*self._tasks, *self._retry_tasks]:
            task.cancel()
        for task in [*self._tasks, *self._retry_tasks]:
            with contextlib.suppress(BaseException):
                await task
        await self.flush_batches(force=True)
        if self.flush_sink is not None:
            with contextlib.suppress(Exception):
                await self.flush_sink()
        if self.pipeline is not None:
            await self.pipeline.aclose()

    @property
    def pending(self) -> int:
        return self.queue.qsize() + self._busy + len(self._retry_tasks)

    def submit(self, sample: TurnSample) -> bool:
        """Queue a finished turn; False (counted) when the queue is full. Never blocks."""
        try:
            self.queue.put_nowait(sample)
        except asyncio.QueueFull:
            self.stats.dropped_queue_full += 1
            logger.warning("sample queue full (%d): turn %d of session %s not trained",
                           self.settings.queue_size, sample.turn, sample.session)  # fmt: skip
            return False
        self.stats.submitted += 1
        return True

    # -- work ----------------------------------------------------------------------------------
    async def _worker(self) -> None:
        while True:
            sample = await self.queue.get()
            self._busy += 1
            try:
                await self._process(sample)
            except Exception:  # noqa: BLE001 - one bad turn never stops the worker
                self.stats.failed += 1
                logger.exception("turn %d of session %s failed in the pipeline", sample.turn, sample.session)
            finally:
                self._busy -= 1

    async def _process(self, sample: TurnSample) -> None:
        distill = None
        if self.pipeline is not None:
            if self.before_process is not None:
                await self.before_process()
            distill = await self.pipeline.process(
                sample.trajectory, prm_already_effective=sample.session in self._effective_sessions
            )
            prm_turns = (distill.prm or {}).get("turns", [])
            statuses = [t.status for t in distill.turns] + [f"prm_{t['status']}" for t in prm_turns]
            if any(t.get("effective") for t in prm_turns):
                self._effective_sessions.add(sample.session)
            if any(s in RETRY_STATUSES for s in statuses) and self._retry_later(sample):
                return
            for status in statuses:
                self.stats.statuses[status] = self.stats.statuses.get(status, 0) + 1
            scored = sum(t.status == "scored" for t in distill.turns)
            self.stats.scored_turns += scored
            self.stats.unscored_turns += len(distill.turns) - scored
        lag = max(0, self.newest_version() - sample.policy_version)
        info = {PROXY_KEY: {"session": sample.session, "turn": sample.turn, "policy_model": sample.policy_model,
                            POLICY_VERSION_KEY: sample.policy_version, "policy_lag": lag,
                            "attempts": sample.attempts + 1, **sample.info}}  # fmt: skip
        rollout = FinishedRollout(trajectory=sample.trajectory, score=0.0, distill=distill, info=info)
        async with self._batch_lock:
            self._batches.setdefault(sample.policy_version, []).append((time.monotonic(), rollout))
        await self.flush_batches()

    def _retry_later(self, sample: TurnSample) -> bool:
        first = sample.info.setdefault("first_attempt_at", time.time())
        if time.time() - first > self.settings.retry_window_s:
            self.stats.gave_up += 1
            return False
        delay = min(self.settings.retry_backoff_max_s, self.settings.retry_backoff_s * 2**sample.attempts)
        sample.attempts += 1
        self.stats.retried += 1

        async def again() -> None:
            await asyncio.sleep(delay)
            await self.queue.put(sample)  # a retry waits for room; it already holds its place

        task = asyncio.create_task(again())
        self._retry_tasks.add(task)
        task.add_done_callback(self._retry_tasks.discard)
        return True

    async def flush_batches(self, force: bool = False) -> None:
        now = time.monotonic()
        ready: list[tuple[int, list[FinishedRollout]]] = []
        async with self._batch_lock:
            for version, batch in list(self._batches.items()):
                size = self.settings.samples_per_group
                while len(batch) >= size:
                    ready.append((version, [r for _, r in batch[:size]]))
                    del batch[:size]
                if batch and (force or now - batch[0][0] >= self.settings.group_wait_s):
                    ready.append((version, [r for _, r in batch]))
                    batch.clear()
                if not batch:
                    del self._batches[version]
        for version, rollouts in ready:
            await self._write_group(version, rollouts)

    async def _write_group(self, version: int, rollouts: list[FinishedRollout]) -> None:
        group = build_group(rollouts, include_messages=True, opd=self.opd)
        group["group_overrides"][POLICY_VERSION_KEY] = version
        group["group_overrides"]["group_size"] = len(rollouts)
        await self.write(group)
        self.stats.samples_grouped += len(rollouts)
        self.stats.groups_written += 1

    async def _flush_old_batches(self) -> None:
        while True:
            await asyncio.sleep(min(1.0, self.settings.group_wait_s))
            try:
                await self.flush_batches()
                if self.flush_sink is not None:
                    await self.flush_sink()
            except Exception:  # noqa: BLE001 - the next tick tries again; groups stay in the sink
                logger.exception("writing groups failed")
