"""Where the proxy's groups go: a groups JSONL file (`hermes-opd send` replays it, `hermes-opd
validate` checks it). Each group is one line, appended and fsynced before it counts as written, so
a proxy killed at any moment leaves whole lines only, each written once."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any


class GroupFileSink:
    """Appends groups to a JSONL file, durably."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.written = 0
        self._lock = asyncio.Lock()

    def _append(self, line: bytes) -> None:
        with self.path.open("ab") as handle:
            handle.write(line)
            handle.flush()
            os.fsync(handle.fileno())

    async def write(self, group: dict[str, Any]) -> None:
        line = (json.dumps(group, separators=(",", ":")) + "\n").encode()
        async with self._lock:
            await asyncio.to_thread(self._append, line)
            self.written += 1
