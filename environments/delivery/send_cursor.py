"""The cursor of `hermes-opd send`: what the Atropos API has acknowledged of one input file.

A small JSON file next to the input (`GROUPS.jsonl.cursor`), rewritten whole and durably
(`write_atomically`: temporary file, fsync, rename, fsync of the directory) after every
acknowledged POST, so a kill at any instant leaves either the old cursor or the new one:

- `acked_offset`/`acked_lines`: the input's bytes and lines up to which every group was
  acknowledged by the API (or reported invalid and skipped with `--skip-invalid`, or refused by the
  API and kept in the rejected directory). A rerun starts there.
- `window_offset`/`window_lines`: where the groups start that the API may still hold in memory, not
  yet handed to a trainer. A restarted API has lost them, so the sender sends them again from there.
- `last_line_offset`/`last_group_id`: the start and stable id of the last acknowledged line; a
  rerun checks them, so a cursor is never applied to a file that changed under it.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from environments.delivery.send_spool import write_atomically
from hermes_opd.contract.errors import HermesOPDError

CURSOR_SUFFIX = ".cursor"
VERSION = 1


class CursorError(HermesOPDError, RuntimeError):
    """The cursor file is unreadable or does not belong to this input."""


@dataclass
class SendCursor:
    acked_offset: int = 0
    acked_lines: int = 0
    window_offset: int = 0
    window_lines: int = 0
    last_line_offset: int | None = None
    last_group_id: str | None = None
    groups_acked: int = 0
    """Groups the API acknowledged over every run (a re-sent group counts again)."""
    posts: int = 0
    """POSTs the API acknowledged over every run."""
    api_step: int | None = None
    """The API's `current_step` when last seen: a lower one on a rerun means the API restarted."""
    version: int = VERSION

    def advance(self, end_offset: int, line: int, line_offset: int, group_id: str | None) -> None:
        self.acked_offset = end_offset
        self.acked_lines = line
        self.last_line_offset = line_offset
        self.last_group_id = group_id

    def rewind_to_window(self) -> int:
        """Move the acknowledged mark back to the window's start; returns how many lines that is."""
        lines = self.acked_lines - self.window_lines
        self.acked_offset, self.acked_lines = self.window_offset, self.window_lines
        self.last_line_offset = self.last_group_id = None
        return lines


def cursor_path(input_path: Path) -> Path:
    return input_path.with_name(input_path.name + CURSOR_SUFFIX)


def load_cursor(path: Path) -> SendCursor:
    """The cursor at `path`, or a fresh one when there is none."""
    if not path.exists():
        return SendCursor()
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise CursorError(
            f"cursor {path} is unreadable ({exc}); delete it to send the file from the start"
        ) from None
    known = {f.name for f in fields(SendCursor)}
    if not isinstance(data, dict) or data.get("version") != VERSION or not known.issuperset(data):
        raise CursorError(f"cursor {path} is not a version {VERSION} cursor of `hermes-opd send`")
    return SendCursor(**data)


def save_cursor(path: Path, cursor: SendCursor) -> None:
    write_atomically(path, json.dumps(asdict(cursor), indent=1).encode("utf-8") + b"\n")
