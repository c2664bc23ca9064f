"""Replay a groups JSONL file into the Atropos API: nothing lost, nothing counted twice by our trainers.

The engine behind `hermes-opd send` (and `hermes-opd process --send`), beside the env's send spool:
it talks to the API only through the spool's Atropos API client (`api_session`, `get_api_json`,
`post_payload`, `post_with_retries`). Each line is validated with the contract's validator, checked
against the trainer's registration (`max_token_len`, and a group size that divides `batch_size`),
stamped with its stable id (`hermes_opd.contract.group_id`) and POSTed with the env's own sender:
the same retry policy, the same "no trainer registered yet" guard, the same 4xx/5xx split. A group
the API refuses (4xx) goes to the rejected directory with the reason, like the env's spool does.

Unlike the env, the sender never spools a group it could not deliver: the input file already holds
it durably, and the cursor file (send_cursor.py) records how far the API has acknowledged. While the
API is unreachable or has no trainer, the sender waits (with backoff) and carries on from its cursor.

Guarantees
----------
- A kill of the sender (even SIGKILL) loses nothing: the cursor is saved after every acknowledged
  POST, and a rerun starts at it. The one POST whose answer arrived before the kill but whose cursor
  write did not is sent again: at most one duplicate POST per kill.
- A restart of the API loses what its memory held (the queue, and batches not yet handed out). The
  sender notices (a failed request, or `current_step` going back) and sends again from the start of
  its window: the groups the API may still have held, computed from `/status`' `queue_size` and the
  queue bound below. Some of those had already reached the trainer; `hermes-opd train` drops them by
  id (trainer_adapters/repeated_groups.py). Other trainers would train them twice.
- Flow control: by default the sender posts only while the API's queue holds fewer than
  `max_queue_batches` batches of sequences, so a file far larger than a batch never sits in the
  API's memory; `max_rate` (groups per second) caps the pace on top. `max_queue_batches=0` turns the
  queue bound off: then the window never shrinks, and a restart sends everything again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from environments.delivery.groups_file import parse_group_line, unwrap_group, without_wrapper
from environments.delivery.send_cursor import CursorError, SendCursor, cursor_path, load_cursor, save_cursor
from environments.delivery.send_spool import (
    APIRejectedError,
    APIUnavailableError,
    GroupSpool,
    SpoolStats,
    api_session,
    get_api_json,
    post_payload,
    post_with_retries,
)
from environments.delivery.tinker_drops import TinkerDropCount
from hermes_opd.contract.bounded_json import GROUPS_INPUT, BoundedJSONError, loads_bounded
from hermes_opd.contract.errors import HermesOPDError
from hermes_opd.contract.group_id import group_digest, with_group_id
from hermes_opd.contract.validation import validate_group
from hermes_opd.runtime.wait_notice import WAIT_NOTICE_S

logger = logging.getLogger(__name__)


class APIGoneError(HermesOPDError, RuntimeError):
    """The API (or a registered trainer) stayed unavailable longer than the sender waits."""


class _APIRestarted(Exception):
    """The API's `current_step` went back: it restarted and lost what it held."""


@dataclass
class ReplayOptions:
    api_url: str
    skip_invalid: bool = False
    max_rate: float | None = None
    """Groups per second at most (None: no rate limit)."""
    max_queue_batches: int = 2
    """Post only while the API's queue holds fewer sequences than this many batches (0: no bound)."""
    poll_s: float = 0.1
    send_attempts: int = 3
    backoff_s: float = 0.5
    backoff_max_s: float = 10.0
    request_timeout_s: float = 120.0
    give_up_after_s: float = 3600.0
    """Stop (a rerun continues) when the API or a trainer has been away this long."""
    drain: bool = True
    """At the end, wait until the API's queue is empty (a restart meanwhile is still recovered)."""
    drain_timeout_s: float = 600.0
    """Stop waiting for the queue when it has not shrunk for this long."""
    resend_window: bool = False
    """Start from the cursor's window instead of its mark (after an API restart the sender missed)."""
    rejected_dir: Path | None = None
    """Where groups the API refuses go (default `<input>.rejected/`)."""


@dataclass(frozen=True)
class InvalidGroup:
    line: int
    message: str


@dataclass
class ReplayResult:
    path: Path
    lines_total: int = 0
    """Complete lines in the file when the run started."""
    acked_lines_before: int = 0
    groups_sent: int = 0
    """Groups the API acknowledged in this run (a re-sent group counts again)."""
    sequences_sent: int = 0
    tokens_sent: int = 0
    invalid: list[InvalidGroup] = field(default_factory=list)
    stopped_at: InvalidGroup | None = None
    """The invalid group that stopped the run (without --skip-invalid)."""
    rejected: int = 0
    restarts: int = 0
    """API restarts (or outages) recovered by sending the window again."""
    resent_lines: int = 0
    """Lines sent again because of those restarts (what the trainer may see twice)."""
    torn_tail: bool = False
    """The file ends in a line without its newline (a `process` still writing, or killed)."""
    still_queued: int | None = None
    """Groups left in the API's queue at the end: fewer than a batch (they wait for more groups),
    or a queue that stopped shrinking (no trainer pulling). None: empty, or not drained."""
    drops: TinkerDropCount = field(default_factory=TinkerDropCount)
    elapsed_s: float = 0.0
    cursor_path: Path | None = None

    @property
    def complete(self) -> bool:
        return self.stopped_at is None and not self.torn_tail

    @property
    def groups_per_s(self) -> float:
        return self.groups_sent / self.elapsed_s if self.elapsed_s > 0 else 0.0


def count_lines(path: Path) -> int:
    """Complete (newline-terminated) lines of `path`, read in blocks."""
    total = 0
    with path.open("rb") as handle:
        while block := handle.read(1 << 20):
            total += block.count(b"\n")
    return total


def _describe_violations(violations: list[Any]) -> str:
    first = violations[0]
    where = "".join(
        f" {name} {value}" for name, value in (("seq", first.seq), ("pos", first.pos)) if value is not None
    )
    more = f" (and {len(violations) - 1} more)" if len(violations) > 1 else ""
    return f"[{first.kind}]{where}: {first.message}{more}"


class GroupReplayer:
    """One replay of one file. `more_coming()` (process --send) says whether the file still grows;
    `on_progress(result)` is called after every acknowledged group."""

    def __init__(
        self,
        path: str | Path,
        options: ReplayOptions,
        *,
        more_coming: Callable[[], bool] | None = None,
        on_progress: Callable[[ReplayResult], None] | None = None,
        on_message: Callable[[str], None] | None = None,
    ) -> None:
        self.path = Path(path)
        self.options = options
        self.more_coming = more_coming
        self.on_progress = on_progress or (lambda _result: None)
        self.say = on_message or logger.warning
        self.cursor_file = cursor_path(self.path)
        self.cursor = SendCursor()
        self.result = ReplayResult(path=self.path, cursor_path=self.cursor_file)
        self.stats = SpoolStats()
        self.batch_size = 0
        self.max_token_len = 0
        self._recent: deque[tuple[int, int, int]] = deque()
        """(line start offset, lines before it, sequences) of acknowledged groups in the window."""
        self._last_step: int | None = None
        self._next_post_at = 0.0
        self._group_sequences = 1
        """Sequences of the last group sent (how the queue's length in groups becomes sequences)."""
        self._rejected: GroupSpool | None = None
        self._session: aiohttp.ClientSession | None = None

    # -- the API's state -------------------------------------------------------------------------
    async def _get(self, route: str) -> dict[str, Any] | None:
        assert self._session is not None
        return await get_api_json(self._session, self.options.api_url, route)

    async def _wait_for_trainer(self) -> None:
        """Until the API answers and a trainer has registered; sets batch_size and max_token_len."""
        started = time.monotonic()
        delay = self.options.poll_s
        said_at: float | None = None
        while True:
            info = await self._get("/info")
            if info is not None and int(info.get("batch_size", -1)) > 0:
                self.batch_size = int(info["batch_size"])
                self.max_token_len = int(info.get("max_token_len", -1))
                return
            waited = time.monotonic() - started
            if waited > self.options.give_up_after_s:
                raise APIGoneError(
                    f"no Atropos API with a registered trainer at {self.options.api_url} for {waited:.0f} s; "
                    f"nothing is lost: rerun the same command to continue from {self.cursor_file}"
                )
            if said_at is None or time.monotonic() - said_at >= WAIT_NOTICE_S:
                said_at = time.monotonic()
                state = "is not reachable" if info is None else "has no registered trainer yet"
                self.say(
                    f"waiting for a trainer: the Atropos API at {self.options.api_url} {state} "
                    f"({waited:.0f} s; Ctrl-C to stop, a rerun continues)"
                )
            await asyncio.sleep(min(delay, WAIT_NOTICE_S))
            delay = min(self.options.backoff_max_s, delay * 2)

    async def _status(self) -> tuple[int, int]:
        """(current_step, queue_size in groups). Raises APIUnavailableError or _APIRestarted."""
        status = await self._get("/status")
        for _ in range(2):  # a stale keep-alive connection fails once; an API that is down, every time
            if status is not None:
                break
            await asyncio.sleep(self.options.poll_s)
            status = await self._get("/status")
        if status is None:
            raise APIUnavailableError(f"{self.options.api_url}/status did not answer")
        step, queued = int(status.get("current_step", 0)), int(status.get("queue_size", 0))
        if self._last_step is not None and step < self._last_step:
            raise _APIRestarted(f"the API's current_step went back from {self._last_step} to {step}")
        self._last_step = step
        self.cursor.api_step = step
        self._shrink_window(queued)
        return step, queued

    def _shrink_window(self, queued_groups: int) -> None:
        """Keep in the window the newest `queued_groups` acknowledged groups (still in the queue)
        and, before them, enough groups to fill the batches the API may hold back unsent."""
        if self.options.max_queue_batches <= 0:
            return  # unbounded queue: the API may still hold anything sent since the window start
        held_back = (self.options.max_queue_batches - 1) * self.batch_size
        keep = 0
        sequences = 0
        for index, (_, _, seqs) in enumerate(reversed(self._recent)):
            if index < queued_groups:
                keep += 1
            elif sequences < held_back:
                sequences += seqs
                keep += 1
            else:
                break
        while len(self._recent) > keep:
            self._recent.popleft()
        if self._recent:
            offset, lines, _ = self._recent[0]
        else:
            offset, lines = self.cursor.acked_offset, self.cursor.acked_lines
        self.cursor.window_offset, self.cursor.window_lines = offset, lines

    # -- pacing ----------------------------------------------------------------------------------
    async def _wait_for_room(self, sequences: int) -> None:
        started = said_at = time.monotonic()
        while True:
            _, queued = await self._status()
            bound = self.options.max_queue_batches * self.batch_size
            if bound <= 0 or queued * sequences < bound:
                break
            if time.monotonic() - said_at >= WAIT_NOTICE_S:
                said_at = time.monotonic()
                self.say(self._queue_notice("waiting for the trainer to pull", queued, sequences, started))
            await asyncio.sleep(self.options.poll_s)
        if self.options.max_rate:
            now = time.monotonic()
            if self._next_post_at > now:
                await asyncio.sleep(self._next_post_at - now)
            self._next_post_at = max(now, self._next_post_at) + 1.0 / self.options.max_rate

    def _queue_notice(self, what: str, queued_groups: int, sequences: int, since: float) -> str:
        """'waiting for ...: the API holds 2 batches (8 sequences in 4 groups; --max-queue-batches 2)'."""
        held = queued_groups * sequences
        batches = held / self.batch_size if self.batch_size > 0 else 0.0
        return (
            f"{what}: the API holds {batches:g} batch{'es' if batches != 1 else ''} of {self.batch_size} "
            f"sequences ({held} sequences in {queued_groups} group(s); --max-queue-batches "
            f"{self.options.max_queue_batches}); {self.result.groups_sent} group(s) sent so far, waiting "
            f"{time.monotonic() - since:.0f} s"
        )

    # -- one line --------------------------------------------------------------------------------
    def _check(self, raw: bytes, line: int) -> tuple[dict[str, Any] | None, str | None]:
        """The payload of a line (wrapper fields dropped, id stamped), or why it must not be sent."""
        try:
            record = loads_bounded(raw, GROUPS_INPUT)
        except BoundedJSONError as exc:
            return None, f"invalid JSON: {exc}"
        group = unwrap_group(record)
        if group is None:
            return None, f"a JSON {type(record).__name__}, not a group object"
        group = without_wrapper(group)
        violations = validate_group(group, group_index=line - 1)
        if violations:
            return None, _describe_violations(violations)
        sizes = [len(seq) for seq in group["tokens"]]
        if self.max_token_len > 0 and max(sizes, default=0) > self.max_token_len:
            return None, (
                f"a sequence has {max(sizes)} tokens, more than the trainer's max_token_len="
                f"{self.max_token_len}: the trainer would fail on it"
            )
        if not sizes or self.batch_size % len(sizes):
            return None, (
                f"a group of {len(sizes)} sequences cannot fill the trainer's batches of {self.batch_size} "
                "sequences exactly (the API takes whole groups)"
            )
        return with_group_id(group), None

    def _invalid(self, line: int, message: str) -> None:
        invalid = InvalidGroup(line, message)
        self.result.invalid.append(invalid)
        if self.options.skip_invalid:
            self.say(f"{self.path} line {line}: invalid group, skipped: {message}")
        else:
            self.result.stopped_at = invalid

    def _reject(self, group: dict[str, Any], line: int, exc: APIRejectedError) -> None:
        if self._rejected is None:
            directory = self.options.rejected_dir or self.path.with_name(self.path.name + ".rejected")
            self._rejected = GroupSpool(directory)
        target = self._rejected.reject(None, [group], f"{self.path} line {line}: {exc}")
        self.result.rejected += 1
        self.say(f"{self.path} line {line}: the API refused the group ({exc}); kept in {target}")

    async def _post_once(self, payload: dict[str, Any]) -> None:
        await post_payload(
            self.options.api_url,
            payload,
            env_id=None,
            require_trainer=True,
            timeout_s=self.options.request_timeout_s,
            session=self._session,
        )

    # -- the run ---------------------------------------------------------------------------------
    def _load_cursor(self) -> None:
        self.cursor = load_cursor(self.cursor_file)
        size = self.path.stat().st_size
        if self.cursor.acked_offset > size:
            raise CursorError(
                f"{self.cursor_file} says {self.cursor.acked_offset} bytes were sent, but {self.path} has "
                f"{size}: the file changed; delete the cursor to send it from the start"
            )
        if self.cursor.last_line_offset is not None and self.cursor.last_group_id is not None:
            with self.path.open("rb") as handle:
                handle.seek(self.cursor.last_line_offset)
                raw = handle.readline()
            group, _ = parse_group_line(raw)
            if group is None or group_digest(group) != self.cursor.last_group_id:
                raise CursorError(
                    f"line {self.cursor.acked_lines} of {self.path} is not the group {self.cursor_file} "
                    "recorded as sent last: the file changed; delete the cursor to send it from the start"
                )

    def _rebuild_window(self) -> None:
        """The window of an earlier run (the groups between the cursor's window and its mark),
        so that the first look at the API's queue does not forget them."""
        with self.path.open("rb") as handle:
            handle.seek(self.cursor.window_offset)
            line = self.cursor.window_lines
            while handle.tell() < self.cursor.acked_offset:
                start = handle.tell()
                raw = handle.readline()
                if not raw:
                    break
                line += 1
                group, _ = parse_group_line(raw) if raw.strip() else (None, None)
                if group is not None and isinstance(group.get("tokens"), list):
                    self._recent.append((start, line - 1, len(group["tokens"])))

    def _save(self) -> None:
        save_cursor(self.cursor_file, self.cursor)

    async def _recover(self, reason: str) -> None:
        """The API went away or restarted: wait for it and a trainer, then send the window again."""
        self.say(f"Atropos API unavailable or restarted ({reason}); waiting for it and a trainer")
        await self._wait_for_trainer()
        lines = self.cursor.rewind_to_window()
        self._recent.clear()
        self._last_step = None
        self.result.restarts += 1
        self.result.resent_lines += lines
        self._save()
        self.say(
            f"the API is back; sending again the {lines} line(s) it may have lost (from line {self.cursor.acked_lines + 1})"
        )

    async def _send_from_cursor(self) -> None:
        options = self.options
        with self.path.open("rb") as handle:
            handle.seek(self.cursor.acked_offset)
            line = self.cursor.acked_lines
            while True:
                start = handle.tell()
                growing = self.more_coming is not None and self.more_coming()  # asked before the read
                raw = handle.readline()
                if not raw or not raw.endswith(b"\n"):
                    if growing:
                        handle.seek(start)
                        await asyncio.sleep(options.poll_s)
                        continue
                    if raw and self.more_coming is None:
                        self.result.torn_tail = True
                        self.say(f"{self.path} line {line + 1} is incomplete (no newline); it was not sent")
                    return
                line += 1
                end = handle.tell()
                if not raw.strip():
                    continue
                payload, error = self._check(raw, line)
                if payload is None:
                    self._invalid(line, error or "invalid")
                    if not options.skip_invalid:
                        return
                    self.cursor.advance(end, line, start, None)
                    self._save()
                    continue
                sequences = len(payload["tokens"])
                try:
                    await self._wait_for_room(sequences)
                    await post_with_retries(
                        self._post_once,
                        payload,
                        self.stats,
                        attempts=options.send_attempts,
                        backoff_s=options.backoff_s,
                        backoff_max_s=options.backoff_max_s,
                    )
                except APIRejectedError as exc:
                    self._reject(payload, line, exc)
                    self.cursor.advance(end, line, start, None)
                    self._save()
                    continue
                except (APIUnavailableError, _APIRestarted) as exc:
                    await self._recover(str(exc))
                    handle.seek(self.cursor.acked_offset)
                    line = self.cursor.acked_lines
                    continue
                group_id = payload["group_overrides"]["hermes_opd_group_id"]
                self.cursor.advance(end, line, start, group_id)
                self.cursor.groups_acked += 1
                self.cursor.posts += 1
                self._recent.append((start, line - 1, sequences))
                self._group_sequences = sequences
                self._save()
                self.result.groups_sent += 1
                self.result.sequences_sent += sequences
                self.result.tokens_sent += sum(len(seq) for seq in payload["tokens"])
                self.result.drops.add(payload)
                self.on_progress(self.result)

    async def _drained(self) -> bool:
        """Wait until the API's queue holds less than one batch (the rest waits for more groups to
        fill a batch). False when the API restarted meanwhile (the window was rewound: send again)."""
        last_queued, last_change = None, time.monotonic()
        started = said_at = time.monotonic()
        while True:
            try:
                _, queued = await self._status()
            except (APIUnavailableError, _APIRestarted) as exc:
                await self._recover(str(exc))
                return False
            self._save()
            if queued * self._group_sequences < self.batch_size:
                self.result.still_queued = queued or None
                return True
            if time.monotonic() - said_at >= WAIT_NOTICE_S:
                said_at = time.monotonic()
                self.say(
                    self._queue_notice(
                        "all groups sent; waiting for the trainer to pull the last of them",
                        queued,
                        self._group_sequences,
                        started,
                    )
                    + f" (gives up after {self.options.drain_timeout_s:.0f} s without progress)"
                )
            if queued != last_queued:
                last_queued, last_change = queued, time.monotonic()
            elif time.monotonic() - last_change > self.options.drain_timeout_s:
                self.result.still_queued = queued
                self.say(
                    f"{queued} group(s) still wait in the API's queue after {self.options.drain_timeout_s:.0f} s "
                    "without progress (is the trainer running?); they were acknowledged and are not resent"
                )
                return True
            await asyncio.sleep(self.options.poll_s)

    async def run(self) -> ReplayResult:
        started = time.monotonic()
        self._load_cursor()
        self.result.lines_total = count_lines(self.path)
        self.result.acked_lines_before = self.cursor.acked_lines
        try:
            async with api_session(self.options.request_timeout_s) as session:
                self._session = session
                await self._wait_for_trainer()
                status = await self._get("/status") or {}
                step = int(status.get("current_step", 0))
                saved_step = self.cursor.api_step
                if self.options.resend_window or (saved_step is not None and step < saved_step):
                    reason = (
                        "--resend-window"
                        if self.options.resend_window
                        else (
                            f"its current_step is {step}, {saved_step} when this file was last sent: it restarted"
                        )
                    )
                    lines = self.cursor.rewind_to_window()
                    self.result.resent_lines += lines
                    self.result.restarts += int(not self.options.resend_window)
                    self.say(f"sending again the {lines} line(s) the API may have lost ({reason})")
                self._last_step = step
                self.cursor.api_step = step
                self._rebuild_window()
                while True:
                    await self._send_from_cursor()
                    if self.result.stopped_at is not None or not self.options.drain:
                        break
                    if await self._drained():
                        break
                self._save()
        finally:
            self._session = None
            self.result.elapsed_s = time.monotonic() - started
            with contextlib.suppress(OSError):
                self.result.lines_total = count_lines(self.path)  # it may have grown (process --send)
        return self.result
