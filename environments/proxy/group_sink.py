"""Where the proxy's groups go.

- `GroupFileSink`: a groups JSONL file (environments/delivery/groups_file.py: `hermes-opd send`
  replays it, `hermes-opd validate` checks it). Each group is one line, appended whole and fsynced
  before it counts as written (`append_whole`): a write that fails (a full disk) leaves the file as
  it was and raises, and the feed keeps the group and tries again (environments/proxy/sample_feed.py).
  A torn tail left by a kill is repaired when the sink opens the file. A path that cannot be written
  (a directory, a parent that cannot be created, no permission) is refused at start-up
  (`GroupsPathError`, one line), never found out turn by turn.
- `AtroposSink`: straight to an Atropos API through the env's send spool
  (environments/delivery/send_spool.py): sent, or kept on disk while the API or its trainer is away
  and resent, oldest first, when it is back. Groups carry no env id (as `hermes-opd send`'s do).
  `batch_size()` reads the registered trainer's batch size (`GET /info`), from which the feed picks
  a group size the API can always pack (environments/delivery/api_packing.py).
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
from pathlib import Path
from typing import Any

from environments.delivery.groups_file import append_whole, group_line, repair_torn_tail
from environments.delivery.send_spool import SendSpool, SpoolSettings, api_session, get_api_json
from hermes_opd.contract.errors import ConfigError

logger = logging.getLogger(__name__)


class GroupsPathError(ConfigError):
    """The groups file cannot be written (refused at start-up)."""


def open_groups_path(path: Path) -> None:
    """Check at start-up that groups can be appended to `path`: create its parent and the file, then
    repair a torn tail. Raises GroupsPathError with one line saying why not."""
    if path.is_dir():
        raise GroupsPathError(f"groups_path {path} is a directory; give a file path")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
        os.close(fd)
        repair_torn_tail(path)
    except OSError as exc:
        reason = os.strerror(exc.errno) if exc.errno else str(exc)
        if exc.errno in (errno.ENOTDIR, errno.EEXIST):
            reason = "a part of its parent path is a file, not a directory"
        raise GroupsPathError(f"groups_path {path} cannot be written: {reason}") from exc


class GroupFileSink:
    """Appends groups to a JSONL file, whole and durably."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        open_groups_path(self.path)
        self.written = 0
        self._lock = asyncio.Lock()
        self._maybe_torn = False

    def _append(self, line: bytes) -> None:
        if self._maybe_torn:  # an earlier cut-back failed: never append onto half a line
            repair_torn_tail(self.path)
            self._maybe_torn = False
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            append_whole(fd, line)
        except OSError:
            self._maybe_torn = True  # cheap to check again: repair_torn_tail reads the last byte
            raise
        finally:
            os.close(fd)

    async def write(self, group: dict[str, Any]) -> None:
        """Append one group. Raises OSError (nothing written) when it cannot be."""
        line = group_line(group, allow_nan=True)
        async with self._lock:
            await asyncio.to_thread(self._append, line)
            self.written += 1


class AtroposSink:
    """Sends groups to an Atropos API through a `SendSpool` in `spool_dir`."""

    def __init__(
        self, api_url: str, spool_dir: str | os.PathLike[str], settings: SpoolSettings | None = None
    ) -> None:
        self.api_url = api_url.rstrip("/")
        self.spool = SendSpool(
            spool_dir, base_url=lambda: self.api_url, env_id=lambda: None, post_json=None, settings=settings
        )
        self.written = 0
        self._batch_size: int | None = None

    async def write(self, group: dict[str, Any]) -> None:
        await self.spool.send(group)
        self.written += 1

    async def flush(self) -> None:
        """Resend what is spooled (the feed calls it every second and at the end)."""
        if self.spool.opened and self.spool.spool.segments():
            await self.spool.flush()

    async def batch_size(self) -> int | None:
        """The registered trainer's batch size (`GET /info`), or None while no trainer has
        registered or the API does not answer. Read once: the first size seen is kept."""
        if self._batch_size is None:
            async with api_session(timeout_s=10.0) as session:
                info = await get_api_json(session, self.api_url, "/info")
            size = (info or {}).get("batch_size")
            if isinstance(size, int) and size > 0:
                self._batch_size = size
        return self._batch_size
