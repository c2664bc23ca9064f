"""The proxy's background half: finished turns -> the OPD pipeline -> groups -> the sink.

Nothing here runs on a request's path. `submit` only puts a turn on a bounded queue (a full queue
drops the turn and counts it: a request never waits for training). Workers run the one OPD pipeline
(environments/pipeline/opd_pipeline.py) over each turn. A turn whose judge or teacher failed (down,
slow, 5xx) is kept and tried again with backoff until `retry_window_s` has passed, so a judge or
teacher that comes back still gets every turn, once. Scored turns are batched, per policy version,
into `ScoredDataGroup`s by the env's group builder and handed to the sink.

Nothing is lost in silence:
- a group the sink cannot take (a full disk: the sink raises OSError and has written nothing) stays
  queued, in order, and is tried again with backoff (`retry_backoff_s` doubling to
  `retry_backoff_max_s`); a full disk is logged once per episode and counted (`disk_full_episodes`,
  `write_failures`, `groups_waiting` in /metrics), and when space returns every queued group is
  written once;
- at `stop`, every turn that is not in a written group (waiting for a retry, still queued after the
  drain window, cut off mid-pipeline, in a group still waiting to be written, in a partial group held
  back by `whole_groups`) is saved to `pending_path` (environments/proxy/pending_turns.py) and
  reloaded at the next `start`; what cannot be saved is logged and counted (`lost_at_stop`).

`whole_groups` (on when groups go to an Atropos API): every group has the same size G, the largest
size <= `samples_per_group` that divides the trainer's batch size (environments/delivery/
api_packing.py), so the API can always pack them into batches. A partial group is never sent: when
it has waited `group_wait_s` and a newer policy version has samples, it joins that version's batch
(the group's `policy_version` is then its oldest sample's; each sample keeps its own in
`overrides[seq]["proxy"]`); at `stop` its turns are saved as pending turns."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from environments.delivery.api_packing import batchable_group_size
from environments.delivery.group_builder import FinishedRollout, build_group
from environments.delivery.groups_file import DISK_FULL_ERRNOS
from environments.pipeline.opd_config import OPDConfig
from environments.pipeline.opd_pipeline import OPDPipeline
from environments.proxy import pending_turns
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
    """A partial group is sent once its oldest sample has waited this long (with `whole_groups`: it
    joins a newer version's batch instead)."""
    retry_window_s: float = 3600.0
    retry_backoff_s: float = 1.0
    retry_backoff_max_s: float = 30.0
    whole_groups: bool = False
    """Send only groups of one size that divides the trainer's batch size (see the module docstring)."""
    pending_path: str | None = None
    """Where `stop` saves the turns it could not deliver, and `start` reloads them (None: they are
    logged and counted as lost)."""


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
    write_failures: int = 0
    """Failed attempts to hand a group to the sink (each retry counts); the group stays queued."""
    write_failure_episodes: int = 0
    """Runs of failed writes (logged once each, at their start, and once when writes resume)."""
    disk_full_episodes: int = 0
    """Of those, the ones that started with a full disk (ENOSPC/EDQUOT)."""
    disk_full: bool = False
    """True while the sink's last write failed for a full disk."""
    groups_waiting: int = 0
    """Groups built and not yet written (queued behind a failed write)."""
    samples_held: int = 0
    """Scored samples in batches not yet cut into groups (with `whole_groups`: partial ones held)."""
    reloaded_at_start: int = 0
    """Turns an earlier run saved at its stop, reloaded by `start`."""
    persisted_at_stop: int = 0
    """Turns saved to `pending_path` at `stop` (not delivered; the next start reloads them)."""
    lost_at_stop: int = 0
    """Turns neither delivered nor saved at `stop` (logged with the reason)."""


@dataclass
class _Entry:
    at: float
    rollout: FinishedRollout
    sample: TurnSample


@dataclass
class _Unwritten:
    group: dict[str, Any]
    samples: list[TurnSample]


class SampleFeed:
    """Bounded queue + workers + per-version batching."""

    def __init__(
        self,
        pipeline: OPDPipeline | None,
        opd: OPDConfig,
        write: Callable[[dict[str, Any]], Awaitable[None]],
        settings: FeedSettings,
        newest_version: Callable[[], int],
        before_process: Callable[[], Awaitable[None]] | None = None,
        flush_sink: Callable[[], Awaitable[None]] | None = None,
        batch_size: Callable[[], Awaitable[int | None]] | None = None,
    ) -> None:
        self.pipeline = pipeline
        self.opd = opd
        self.write = write
        self.settings = settings
        self.newest_version = newest_version
        self.before_process = before_process
        self.flush_sink = flush_sink
        """Called every second and at the end: a sink that keeps groups for later resends them."""
        self.batch_size = batch_size
        """With `whole_groups`: the trainer's batch size (None while unknown: no group is cut yet)."""
        self.queue: asyncio.Queue[TurnSample] = asyncio.Queue(maxsize=settings.queue_size)
        self.stats = FeedStats()
        self._batches: dict[int, list[_Entry]] = {}
        self._tasks: list[asyncio.Task] = []
        self._retry_tasks: set[asyncio.Task] = set()
        self._waiting_retry: dict[int, TurnSample] = {}
        """Turns between a failed attempt and their return to the queue (saved at stop)."""
        self._in_flight: dict[int, TurnSample] = {}
        """Turns a worker holds that are not yet in a batch (saved at stop if cut off)."""
        self._unwritten: deque[_Unwritten] = deque()
        self._write_lock = asyncio.Lock()
        self._next_write_at = 0.0
        self._write_delay = settings.retry_backoff_s
        self._write_failing = False
        self._writing: tuple[_Unwritten, asyncio.Future] | None = None
        self._group_size_logged: int | None = None
        self._busy = 0
        self._batch_lock = asyncio.Lock()
        self._effective_sessions: set[str] = set()
        """Sessions that already have a process-reward turn that trains (at least one per session)."""

    # -- lifecycle -----------------------------------------------------------------------------
    def start(self) -> None:
        self._tasks = [asyncio.create_task(self._worker()) for _ in range(self.settings.workers)]
        self._tasks.append(asyncio.create_task(self._flush_old_batches()))
        self._reload_pending()

    async def stop(self, drain_s: float = 30.0) -> None:
        """Score what is queued (up to `drain_s`), write every batch (partial ones included, except
        with `whole_groups`), then save every turn not delivered to `pending_path`."""
        deadline = time.monotonic() + drain_s
        while (not self.queue.empty() or self._busy) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        for task in [*self._tasks, *self._retry_tasks]:
            task.cancel()
        for task in [*self._tasks, *self._retry_tasks]:
            with contextlib.suppress(BaseException):
                await task
        await self._finish_write()
        left: list[TurnSample] = [*self._waiting_retry.values(), *self._in_flight.values()]
        self._waiting_retry.clear()
        self._in_flight.clear()
        while not self.queue.empty():
            left.append(self.queue.get_nowait())
        if self.settings.whole_groups:
            await self.flush_batches()  # the whole groups still batched; partial ones stay
            async with self._batch_lock:
                left += [entry.sample for batch in self._batches.values() for entry in batch]
                self._batches.clear()
                self.stats.samples_held = 0
        else:
            await self.flush_batches(force=True)
        await self._write_waiting(force=True)
        left += [sample for item in self._unwritten for sample in item.samples]
        self._unwritten.clear()
        self.stats.groups_waiting = 0
        if self.flush_sink is not None:
            try:
                await self.flush_sink()
            except Exception as exc:  # noqa: BLE001 - what the sink keeps, it resends at the next start
                logger.warning("the sink's last flush failed (%s); it keeps what it holds", exc)
        self._save_pending(left)
        if self.pipeline is not None:
            await self.pipeline.aclose()

    @property
    def pending(self) -> int:
        return self.queue.qsize() + self._busy + len(self._retry_tasks)

    def judge_feedback_counts(self) -> dict[str, int]:
        """How the rules judges read the users' replies (judge/user_feedback_tally.py), above all
        the replies they could not read; {} for a judge that keeps no tally (llm)."""
        out: dict[str, int] = {}
        for role in ("judge", "prm_judge"):
            tally = getattr(getattr(self.pipeline, role, None), "feedback_tally", None)
            if tally is not None:
                out.update(tally.as_metrics(prefix=f"{role}_user_feedback_"))
        return out

    def submit(self, sample: TurnSample) -> bool:
        """Queue a finished turn; False (counted) when the queue is full. Never blocks."""
        try:
            self.queue.put_nowait(sample)
        except asyncio.QueueFull:
            self.stats.dropped_queue_full += 1
            logger.warning(
                "sample queue full (%d): turn %d of session %s not trained",
                self.settings.queue_size,
                sample.turn,
                sample.session,
            )
            return False
        self.stats.submitted += 1
        return True

    # -- pending turns across restarts -----------------------------------------------------------
    def _reload_pending(self) -> None:
        if self.settings.pending_path is None:
            return
        path = Path(self.settings.pending_path)
        samples, bad = pending_turns.load(path)
        if bad:
            self.stats.lost_at_stop += bad  # an earlier stop's turns that cannot be read back
        if not samples:
            return
        self.stats.reloaded_at_start += len(samples)
        logger.warning(
            "reloaded %d turn(s) an earlier run could not deliver (%s); they are scored again",
            len(samples),
            path,
        )
        for sample in samples:
            self._requeue(sample, 0.0)

    def _save_pending(self, samples: list[TurnSample]) -> None:
        if self.settings.pending_path is None:
            if samples:
                self.stats.lost_at_stop += len(samples)
                logger.error(
                    "%d turn(s) not delivered at stop and no pending_path to save them: lost", len(samples)
                )
            return
        path = Path(self.settings.pending_path)
        try:
            saved = pending_turns.save(path, samples)
        except OSError as exc:
            self.stats.lost_at_stop += len(samples)
            logger.error(
                "%d turn(s) not delivered at stop could not be saved to %s (%s): lost",
                len(samples),
                path,
                exc,
            )
            with contextlib.suppress(OSError):
                path.unlink()  # its turns were reloaded by this run: never deliver them twice
            return
        self.stats.persisted_at_stop += saved
        if saved:
            logger.warning(
                "%d turn(s) not delivered at stop saved to %s; the next start delivers them", saved, path
            )

    # -- work ----------------------------------------------------------------------------------
    async def _worker(self) -> None:
        while True:
            sample = await self.queue.get()
            self._busy += 1
            self._in_flight[id(sample)] = sample
            try:
                await self._process(sample)
            except asyncio.CancelledError:
                raise  # the turn stays in _in_flight: stop saves it
            except Exception:  # noqa: BLE001 - one bad turn never stops the worker
                self.stats.failed += 1
                logger.exception("turn %d of session %s failed in the pipeline", sample.turn, sample.session)
            finally:
                self._busy -= 1
            self._in_flight.pop(id(sample), None)

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
        info = {
            PROXY_KEY: {
                "session": sample.session,
                "turn": sample.turn,
                "policy_model": sample.policy_model,
                POLICY_VERSION_KEY: sample.policy_version,
                "policy_lag": lag,
                "attempts": sample.attempts + 1,
                **sample.info,
            }
        }
        rollout = FinishedRollout(trajectory=sample.trajectory, score=0.0, distill=distill, info=info)
        async with self._batch_lock:
            self._batches.setdefault(sample.policy_version, []).append(
                _Entry(time.monotonic(), rollout, sample)
            )
            self._in_flight.pop(id(sample), None)
        await self.flush_batches()

    def _retry_later(self, sample: TurnSample) -> bool:
        first = sample.info.setdefault("first_attempt_at", time.time())
        if time.time() - first > self.settings.retry_window_s:
            self.stats.gave_up += 1
            logger.warning(
                "turn %d of session %s: judge/teacher still failing after %.0f s; sent unscored",
                sample.turn,
                sample.session,
                self.settings.retry_window_s,
            )
            return False
        delay = min(self.settings.retry_backoff_max_s, self.settings.retry_backoff_s * 2**sample.attempts)
        sample.attempts += 1
        self.stats.retried += 1
        self._requeue(sample, delay)
        self._in_flight.pop(id(sample), None)
        return True

    def _requeue(self, sample: TurnSample, delay: float) -> None:
        """Put `sample` back on the queue after `delay` (waiting for room); until then it is saved
        at stop."""
        self._waiting_retry[id(sample)] = sample

        async def again() -> None:
            await asyncio.sleep(delay)
            await self.queue.put(sample)  # a retry waits for room; it already holds its place
            self._waiting_retry.pop(id(sample), None)

        task = asyncio.create_task(again())
        self._retry_tasks.add(task)
        task.add_done_callback(self._retry_tasks.discard)

    # -- groups ----------------------------------------------------------------------------------
    async def _group_size(self) -> int | None:
        wanted = self.settings.samples_per_group
        if not self.settings.whole_groups or self.batch_size is None:
            return wanted
        try:
            batch = await self.batch_size()
        except Exception as exc:  # noqa: BLE001 - unknown for now; asked again at the next flush
            logger.debug("trainer batch size unknown: %s", exc)
            batch = None
        if batch is None:
            # No trainer has registered (or the API is away): whole groups of samples_per_group go
            # to the spool, so they wait on disk, not in memory; partial ones still wait here.
            return wanted
        size = batchable_group_size(wanted, batch)
        if size != self._group_size_logged:
            self._group_size_logged = size
            if size != wanted:
                logger.warning(
                    "groups of %d samples (samples_per_group %d does not divide the trainer's batch "
                    "size %d; uneven groups could wait in the API for good)",
                    size,
                    wanted,
                    batch,
                )
        return size

    async def flush_batches(self, force: bool = False) -> None:
        size = await self._group_size()
        now = time.monotonic()
        ready: list[list[_Entry]] = []
        async with self._batch_lock:
            if size is not None:
                if self.settings.whole_groups:
                    self._carry_old_partials(now)
                for version in sorted(self._batches):
                    batch = self._batches[version]
                    while len(batch) >= size:
                        ready.append(batch[:size])
                        del batch[:size]
                    due = bool(batch) and (force or now - batch[0].at >= self.settings.group_wait_s)
                    if due and not self.settings.whole_groups:
                        ready.append(list(batch))
                        batch.clear()
                    if not batch:
                        del self._batches[version]
            self.stats.samples_held = sum(len(batch) for batch in self._batches.values())
        for entries in ready:  # all queued before the first await: a cancel loses none of them
            self._queue_group(entries)
        if ready:
            await self._write_waiting()

    def _carry_old_partials(self, now: float) -> None:
        """With `whole_groups`: a partial batch of an older version that has waited `group_wait_s`
        joins the newest version's batch (its samples first), so it is never stranded."""
        if len(self._batches) < 2:
            return
        newest = max(self._batches)
        carried: list[_Entry] = []
        for version in sorted(self._batches):
            batch = self._batches[version]
            if version != newest and batch and now - batch[0].at >= self.settings.group_wait_s:
                carried += batch
                del self._batches[version]
        if carried:
            self._batches[newest][:0] = carried

    def _queue_group(self, entries: list[_Entry]) -> None:
        rollouts = [e.rollout for e in entries]
        group = build_group(rollouts, include_messages=True, opd=self.opd)
        group["group_overrides"][POLICY_VERSION_KEY] = min(e.sample.policy_version for e in entries)
        group["group_overrides"]["group_size"] = len(rollouts)
        self._unwritten.append(_Unwritten(group, [e.sample for e in entries]))
        self.stats.groups_waiting = len(self._unwritten)

    async def _write_waiting(self, force: bool = False) -> None:
        """Hand the queued groups to the sink, oldest first; stop at the first failure (the group
        stays queued, the next try is after a backoff)."""
        async with self._write_lock:
            if not self._unwritten or (not force and time.monotonic() < self._next_write_at):
                return
            while self._unwritten:
                item = self._unwritten[0]
                # shielded: a stop that cancels this task waits for the write (`_finish_write`), so
                # a group the sink took is never also saved as pending turns
                self._writing = (item, asyncio.ensure_future(self.write(item.group)))
                try:
                    await asyncio.shield(self._writing[1])
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # noqa: BLE001 - the sink wrote nothing: keep the group, retry
                    self._writing = None
                    self._write_failed(exc)
                    return
                self._writing = None
                self._written(item)

    def _written(self, item: _Unwritten) -> None:
        if self._unwritten and self._unwritten[0] is item:
            self._unwritten.popleft()
        self.stats.samples_grouped += len(item.samples)
        self.stats.groups_written += 1
        self.stats.groups_waiting = len(self._unwritten)
        if self._write_failing:
            logger.warning(
                "groups are written again after %d failed attempt(s) (%d still queued)",
                self.stats.write_failures,
                len(self._unwritten),
            )
            self._write_failing = self.stats.disk_full = False
            self._next_write_at = 0.0

    async def _finish_write(self, wait_s: float = 30.0) -> None:
        """At stop, after the tasks were cancelled: wait (up to `wait_s`) for a write the sink had
        begun, and count it if it succeeded. One still running after that is cancelled, and its
        group is saved with the pending turns (an Atropos API may then get it twice: at least once)."""
        if self._writing is None:
            return
        item, task = self._writing
        self._writing = None
        with contextlib.suppress(BaseException):
            await asyncio.wait_for(asyncio.shield(task), wait_s)
        if not task.done():
            task.cancel()
            logger.warning(
                "a group write still running at stop was cancelled; its turns are saved as pending"
            )
            return
        if not task.cancelled() and task.exception() is None:
            self._written(item)

    def _write_failed(self, exc: Exception) -> None:
        stats = self.stats
        stats.write_failures += 1
        disk_full = isinstance(exc, OSError) and exc.errno in DISK_FULL_ERRNOS
        if not self._write_failing:
            self._write_failing = True
            self._write_delay = self.settings.retry_backoff_s
            stats.write_failure_episodes += 1
            stats.disk_full_episodes += disk_full
            logger.error(
                "%s: %d group(s) kept in memory and tried again every %g-%g s until it works",
                "disk full" if disk_full else f"writing a group failed ({exc})",
                len(self._unwritten),
                self.settings.retry_backoff_s,
                self.settings.retry_backoff_max_s,
            )
        else:
            self._write_delay = min(self.settings.retry_backoff_max_s, self._write_delay * 2)
        stats.disk_full = disk_full
        self._next_write_at = time.monotonic() + self._write_delay

    async def _flush_old_batches(self) -> None:
        while True:
            await asyncio.sleep(min(1.0, self.settings.group_wait_s, self.settings.retry_backoff_s))
            try:
                await self.flush_batches()
                await self._write_waiting()
                if self.flush_sink is not None:
                    await self.flush_sink()
            except Exception:  # noqa: BLE001 - the next tick tries again; groups stay in the sink
                logger.exception("writing groups failed")
