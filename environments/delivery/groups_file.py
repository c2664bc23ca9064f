"""The groups file: one ScoredDataGroup per JSON line, read, written and resumed here only.

Its writers: `hermes-opd process` (`GroupWriter`, each line led by `group_index` and `task_id`),
the proxy (environments/proxy/group_sink.py: the group alone) and the send spool's segments
(environments/delivery/send_spool.py). Its readers: `hermes-opd validate`, `send`, `inspect` and the
replay engine (environments/delivery/group_replay.py).

- A line is a ScoredDataGroup dict exactly as Atropos' `process` mode writes it, or a wrapper
  `{"group": {...}, ...}` (any other keys of the wrapper are ignored); a line counts as a wrapper
  when it has a dict under "group" and no "tokens" of its own (`unwrap_group`).
- Every line is read within `hermes_opd.contract.bounded_json.GROUPS_INPUT`.
- A line is written whole, then fsynced; a write that fails part-way is cut back, so the file never
  holds half a line in the middle (`append_whole`, used by `GroupWriter` and the proxy's sink).
- A torn tail (a last line without its newline: a kill or a failed cut-back) is repaired when the
  file is opened for appending (`repair_torn_tail`): cut to the last complete line, the cut bytes
  saved aside in `<file>.torn-<time_ns>` and logged, so the next line is never merged onto it.
- Resume (`scan_output`): the `group_index`/`task_id` of every complete line of `process`'s output,
  read without parsing the (large) rest of each line, and a torn last line cut off.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hermes_opd.contract.bounded_json import GROUPS_INPUT, BoundedJSONError, iter_jsonl, loads_bounded
from hermes_opd.contract.errors import HermesOPDError

logger = logging.getLogger(__name__)

DISK_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
"""A full disk or an exhausted quota: a write that may succeed once space returns."""

WRAPPER_FIELDS = ("group_index", "task_id")
"""Fields `hermes-opd process` puts in front of each group; not part of the ScoredDataGroup."""
HEAD_PATTERN = re.compile(rb'^\{\s*"group_index"\s*:\s*(\d+)\s*,\s*"task_id"\s*:\s*')


class OutputError(HermesOPDError, RuntimeError):
    """The output file cannot be resumed (not ours, or written with another task order)."""


# -- reading --------------------------------------------------------------------------------------
def unwrap_group(record: Any) -> dict[str, Any] | None:
    """The ScoredDataGroup inside one parsed JSONL record, or None if it is not an object."""
    if not isinstance(record, dict):
        return None
    inner = record.get("group")
    if isinstance(inner, dict) and "tokens" not in record:
        return inner
    return record


def without_wrapper(group: dict[str, Any]) -> dict[str, Any]:
    """`group` without the fields `hermes-opd process` puts in front of it (what the API is sent)."""
    return {k: v for k, v in group.items() if k not in WRAPPER_FIELDS}


def parse_group_line(raw: bytes) -> tuple[dict[str, Any] | None, str | None]:
    """(the group of one line, wrapper fields dropped, None), or (None, why it is not one)."""
    try:
        group = unwrap_group(loads_bounded(raw, GROUPS_INPUT))
    except BoundedJSONError as exc:
        return None, str(exc)
    if group is None:
        return None, "not an object"
    return without_wrapper(group), None


def iter_groups(path: str | Path) -> Iterator[tuple[int, dict[str, Any] | None, str | None]]:
    """Yield `(line_number, group, error)` for each non-blank line, one line in memory at a time,
    each read within GROUPS_INPUT (hermes_opd/contract/bounded_json.py).

    `group` is None and `error` says why when the line is not a JSON object (or too large, too
    deep, not UTF-8); the lines after it are still read. Raises OSError when the file cannot be
    opened.
    """
    for line_number, record, error in iter_jsonl(path, GROUPS_INPUT):
        if error is not None:
            yield line_number, None, error
            continue
        group = unwrap_group(record)
        if group is None:
            yield line_number, None, f"a JSON {type(record).__name__}, not an object"
            continue
        yield line_number, group, None


# -- writing --------------------------------------------------------------------------------------
def group_line(group: dict[str, Any], *, allow_nan: bool = False) -> bytes:
    """One line of the file: compact JSON and a newline. `allow_nan`: what the proxy and the spool
    have always written (Python's `NaN`); `process` refuses it."""
    return json.dumps(group, allow_nan=allow_nan, separators=(",", ":")).encode("utf-8") + b"\n"


def append_durably(path: Path, data: bytes) -> None:
    """Append `data` (whole lines) to `path` and fsync it before returning; all or nothing
    (`append_whole`)."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        append_whole(fd, data)
    finally:
        os.close(fd)


class TornWriteError(HermesOPDError, OSError):
    """A write failed part-way and cutting it back failed too: the file may end in half a line
    (`repair_torn_tail` before the next append)."""


def append_whole(fd: int, data: bytes) -> None:
    """Append `data` to the O_APPEND file `fd` and fsync it: it lands whole or not at all.

    One `os.write` of the whole buffer; a short write (what a full disk gives) or a failed write or
    fsync is cut back to the size before it and raised as OSError (a short write as ENOSPC). When
    even the cut-back fails, TornWriteError says the file must be repaired before the next append."""
    start = os.fstat(fd).st_size
    try:
        written = os.write(fd, data)
        if written != len(data):
            raise OSError(errno.ENOSPC, f"short write: {written} of {len(data)} bytes (disk full?)")
        os.fsync(fd)
    except BaseException as exc:
        try:
            os.ftruncate(fd, start)
        except OSError as cut:
            raise TornWriteError(
                getattr(exc, "errno", None) or errno.EIO,
                f"{exc}; cutting back to {start} bytes failed too: {cut}",
            ) from exc
        raise
    return None


@dataclass
class TornTail:
    """What `repair_torn_tail` cut off."""

    removed_bytes: int
    saved_to: Path | None
    """Where the cut bytes were saved (None: saving them failed; the log line says so)."""


def repair_torn_tail(path: Path) -> TornTail | None:
    """Cut `path` back to its last complete line (ending in a newline) if it ends in a torn one.

    The cut bytes are saved to `<path>.torn-<time_ns>` first and the repair is logged; returns None
    when there was nothing to repair (no file, empty, or ending in a newline)."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return None
    if size == 0:
        return None
    with path.open("r+b") as handle:
        handle.seek(size - 1)
        if handle.read(1) == b"\n":
            return None
        good_end, block = 0, 1 << 16
        position = size
        while position > 0:
            start = max(0, position - block)
            handle.seek(start)
            chunk = handle.read(position - start)
            newline = chunk.rfind(b"\n")
            if newline >= 0:
                good_end = start + newline + 1
                break
            position = start
        handle.seek(good_end)
        torn = handle.read()
        saved_to: Path | None = path.with_name(f"{path.name}.torn-{time.time_ns()}")
        try:
            saved_to.write_bytes(torn)  # type: ignore[union-attr]
        except OSError as exc:
            logger.error("could not save the torn tail of %s (%d bytes) aside: %s", path, len(torn), exc)
            saved_to = None
        handle.truncate(good_end)
        handle.flush()
        os.fsync(handle.fileno())
    logger.warning(
        "%s ended in a torn line: cut %d byte(s) back to its last complete line (saved to %s)",
        path,
        len(torn),
        saved_to,
    )
    return TornTail(len(torn), saved_to)


class GroupWriter:
    """Appends one group per line, whole (`append_whole`): the line is written completely, then
    fsynced. A write that fails part-way (disk full) is cut back, so the file never holds half a line
    in the middle."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        created = not path.exists()
        self.path = path
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        if created:
            with contextlib.suppress(OSError):
                dir_fd = os.open(path.parent, os.O_RDONLY)
                try:
                    os.fsync(dir_fd)
                finally:
                    os.close(dir_fd)

    def write(self, group_index: int, task_id: str, group: dict[str, Any]) -> int:
        record = {"group_index": group_index, "task_id": task_id}
        record.update((k, v) for k, v in group.items() if k not in record)
        data = group_line(record)
        append_whole(self._fd, data)
        return len(data)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


# -- resuming -------------------------------------------------------------------------------------
@dataclass
class ExistingOutput:
    """What a previous run left in the output file."""

    tasks: dict[int, str] = field(default_factory=dict)
    """group_index -> task_id of every complete line."""
    lines: dict[int, int] = field(default_factory=dict)
    """group_index -> 1-based line number."""
    truncated_bytes: int = 0
    """Size of the torn last line that was cut off (0: none)."""


def _head_of(line: bytes) -> tuple[int, str] | None:
    match = HEAD_PATTERN.match(line)
    if match:
        with contextlib.suppress(json.JSONDecodeError, UnicodeDecodeError):
            task_id, _ = json.JSONDecoder().raw_decode(
                line[match.end() : match.end() + 4096].decode("utf-8", "replace")
            )
            if isinstance(task_id, str):
                return int(match.group(1)), task_id
    try:
        record = loads_bounded(line, GROUPS_INPUT)
    except BoundedJSONError:
        return None
    if isinstance(record, dict) and isinstance(record.get("group_index"), int):
        return record["group_index"], str(record.get("task_id"))
    return None


def _looks_like_our_start(line: bytes) -> bool:
    """True for the beginning of a line this job writes (however short the torn piece is)."""
    lead = b'{"group_index":'
    return line.startswith(lead) or lead.startswith(line)


def scan_output(path: Path, repair: bool = True) -> ExistingOutput:
    """Read the `group_index`/`task_id` of every complete line of `path`; cut off a torn last line.

    A torn line (a last line without its newline that starts like one of ours) is what a kill in
    the middle of a write leaves; its group is collected again. Raises OutputError for any other
    unreadable line, a line without `group_index`, or a duplicate index: a file this job did not
    write is never modified."""
    existing = ExistingOutput()
    if not path.exists():
        return existing
    if not path.is_file():
        raise OutputError(f"output {path} exists and is not a file")
    good_end = 0
    with path.open("rb") as handle:
        number = 0
        while True:
            line = handle.readline()
            if not line:
                break
            number += 1
            if not line.endswith(b"\n"):
                if not _looks_like_our_start(line):
                    raise OutputError(
                        f"{path} line {number} does not end with a newline and is not a group written by "
                        "`hermes-opd process`; give this job another --out, or --overwrite to start over"
                    )
                break  # the torn tail of an interrupted write
            if line.strip():
                head = _head_of(line)
                if head is None:
                    raise OutputError(
                        f"{path} line {number} is not a group written by `hermes-opd process` (no readable "
                        "group_index); give this job another --out, or --overwrite to start over"
                    )
                index, task_id = head
                if index in existing.tasks:
                    raise OutputError(
                        f"{path}: group_index {index} appears twice (lines {existing.lines[index]} and {number})"
                    )
                existing.tasks[index] = task_id
                existing.lines[index] = number
            good_end += len(line)
    size = path.stat().st_size
    if size > good_end:
        existing.truncated_bytes = size - good_end
        if repair:
            with path.open("r+b") as handle:
                handle.truncate(good_end)
                handle.flush()
                os.fsync(handle.fileno())
    return existing
