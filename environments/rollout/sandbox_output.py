"""The one way the env reads what came out of a sandbox: a data-style report, a code-suite call,
reply or verdict, a stdio program's output, a file a tool reads back. Every byte of it may have
been written to be expensive, and the env's event loop also runs every other rollout of the
group, whose rewards must not depend on it.

- `parse_off_loop(fn, data, ...)` runs `fn` (a pure function that parses, checks or judges `data`)
  in a worker thread when `data` is larger than INLINE_BYTES, and inline when it is smaller (a
  few microseconds of work cost less than the hand-over to a thread).
- The JSON in it is read by `environments.tasks.suite_format.strict_json`, which bounds the raw
  bytes, the number of values and the depth BEFORE decoding (hermes_opd/contract/bounded_json.py),
  so the thread's work is bounded too: a document too large or too complex to decode in a
  fraction of a second is refused without being decoded. The pre-scan and the decode are short C
  calls between Python steps, so the thread never keeps the interpreter's lock for long (measured
  by `hermes-opd bench reply-flood`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

INLINE_BYTES = 16 * 1024
"""Sandbox output at most this long is parsed on the event loop itself (at most ~16,000 values)."""


def _size(data: Any) -> int:
    if isinstance(data, bytes | bytearray | memoryview | str):
        return len(data)
    size = getattr(data, "output", None)  # a CommandResult
    return len(size) if isinstance(size, str) else INLINE_BYTES + 1


async def parse_off_loop(fn: Callable[..., T], data: Any, /, *args: Any) -> T:
    """`fn(data, *args)`, off the event loop unless `data` is small."""
    if _size(data) <= INLINE_BYTES:
        return fn(data, *args)
    return await asyncio.to_thread(fn, data, *args)
