"""Where the proxy's groups go.

- `GroupFileSink`: a groups JSONL file (environments/delivery/groups_file.py: `hermes-opd send`
  replays it, `hermes-opd validate` checks it). Each group is one line, appended and fsynced before
  it counts as written, so a proxy killed at any moment leaves whole lines only, each written once.
- `AtroposSink`: straight to an Atropos API through the env's send spool
  (environments/delivery/send_spool.py): sent, or kept on disk while the API or its trainer is away
  and resent, oldest first, when it is back. Groups carry no env id (as `hermes-opd send`'s do).
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

from environments.delivery.groups_file import append_durably, group_line
from environments.delivery.send_spool import SendSpool, SpoolSettings


class GroupFileSink:
    """Appends groups to a JSONL file, durably."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.written = 0
        self._lock = asyncio.Lock()

    async def write(self, group: dict[str, Any]) -> None:
        line = group_line(group, allow_nan=True)
        async with self._lock:
            await asyncio.to_thread(append_durably, self.path, line)
            self.written += 1


class AtroposSink:
    """Sends groups to an Atropos API through a `SendSpool` in `spool_dir`."""

    def __init__(
        self, api_url: str, spool_dir: str | os.PathLike[str], settings: SpoolSettings | None = None
    ) -> None:
        self.api_url = api_url.rstrip("/")
        self.spool = SendSpool(spool_dir, base_url=lambda: self.api_url, env_id=lambda: None, post_json=None,
                               settings=settings)  # fmt: skip
        self.written = 0

    async def write(self, group: dict[str, Any]) -> None:
        await self.spool.send(group)
        self.written += 1

    async def flush(self) -> None:
        """Resend what is spooled (the feed calls it every second and at the end)."""
        if self.spool.opened and self.spool.spool.segments():
            await self.spool.flush()
