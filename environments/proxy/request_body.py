"""Read a request's JSON body as an adversary's input: bounded in size, in read time, in nesting
depth and value count, parsed off the event loop when large, and with every string valid Unicode
(a lone surrogate such as `"\\ud800"` cannot be encoded to UTF-8 later, so it is refused here).
Every refusal is one `WireError`; the wire renders it in its own error shape.

Two bounds hold at once: one per request (`max_bytes`) and one in total (`max_bytes_in_flight`,
the bytes of every body being read or parsed right now): over it, a request is told to retry
(503 overloaded) instead of queueing more memory."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from environments.proxy.conversation import WireError
from hermes_opd.contract.bounded_json import BoundedJSONError, JSONBounds, loads_bounded

_PARSE_INLINE_BYTES = 64 * 1024
"""Smaller bodies are parsed on the loop (a thread hop costs more than the parse)."""
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


@dataclass(frozen=True)
class BodyLimits:
    max_bytes: int = 4 * 1024 * 1024
    max_depth: int = 64
    max_values: int = 1_000_000
    read_timeout_s: float = 30.0
    """The whole body must arrive within this (a client that trickles it is cut off: 408)."""
    max_bytes_in_flight: int = 64 * 1024 * 1024


class BodyReader:
    """The bounded JSON reader of one server (it holds the bytes-in-flight budget)."""

    def __init__(self, limits: BodyLimits, executor: Executor | None = None) -> None:
        self.limits = limits
        self.executor = executor
        """Where large bodies are parsed (the proxy passes its planner threads, so that few threads
        ever compete with the event loop for the interpreter); None: asyncio's default."""
        self.bounds = JSONBounds(
            max_bytes=limits.max_bytes,
            max_depth=limits.max_depth,
            max_elements=limits.max_values,
            unique_keys=False,
        )
        self.in_flight = 0
        self.large_bytes_done = 0
        """Bytes of the bodies over `_PARSE_INLINE_BYTES` read so far, handled or refused (their
        memory is freed once their requests end: environments/proxy/memory_return.py)."""

    async def read_json(self, request: web.Request, convert: Callable[[Any], Any] | None = None) -> Any:
        """The body, decoded, then passed through `convert` (a wire's request parser) in the same
        place: on the loop for a small body, in a worker thread for a large one, whose parse and
        validation walk every message."""
        limits = self.limits
        declared = request.content_length
        if declared is not None and declared > limits.max_bytes:
            raise WireError(
                f"request body over {limits.max_bytes} bytes", "too_large", code="request_too_large"
            )
        reserved = declared or 0
        if self.in_flight + max(reserved, 1) > limits.max_bytes_in_flight:
            raise WireError(
                "the proxy is reading too many large requests right now; retry later", "overloaded"
            )
        self.in_flight += reserved
        try:
            raw = await self._read(request, reserved)
            reserved = max(reserved, len(raw))
            request[BODY_BYTES] = len(raw)
            return await self._parse(raw, convert)
        finally:
            self.in_flight -= reserved
            if reserved > _PARSE_INLINE_BYTES:
                self.large_bytes_done += reserved

    async def _read(self, request: web.Request, reserved: int) -> bytes:
        limits = self.limits
        chunks: list[bytes] = []
        size = 0
        try:
            async with asyncio.timeout(limits.read_timeout_s):
                while chunk := await request.content.read(256 * 1024):
                    size += len(chunk)
                    if size > limits.max_bytes:
                        raise WireError(
                            f"request body over {limits.max_bytes} bytes",
                            "too_large",
                            code="request_too_large",
                        )
                    if size > reserved and self.in_flight + size - reserved > limits.max_bytes_in_flight:
                        raise WireError(
                            "the proxy is reading too many large requests right now; retry later",
                            "overloaded",
                        )
                    chunks.append(chunk)
        except TimeoutError:
            raise WireError(
                f"the request body did not arrive within {limits.read_timeout_s:g} s", "timeout"
            ) from None
        return b"".join(chunks)

    async def _parse(self, raw: bytes, convert: Callable[[Any], Any] | None) -> Any:
        if not raw:
            raise WireError("the request body is not valid JSON")
        if len(raw) <= _PARSE_INLINE_BYTES:
            return self._parse_sync(raw, convert)
        return await asyncio.get_running_loop().run_in_executor(self.executor, self._parse_sync, raw, convert)

    def _parse_sync(self, raw: bytes, convert: Callable[[Any], Any] | None) -> Any:
        value = self._decode(raw)
        return value if convert is None else convert(value)

    def _decode(self, raw: bytes) -> Any:
        try:
            value = loads_bounded(raw, self.bounds)
        except BoundedJSONError as exc:
            message = str(exc)
            if message.startswith("not valid JSON") or message.startswith("not valid UTF-8"):
                raise WireError("the request body is not valid JSON") from None
            raise WireError(f"the request body is refused: {message}") from None
        if _SURROGATE_ESCAPE.search(raw):
            try:
                json.dumps(value, ensure_ascii=False).encode("utf-8")
            except UnicodeEncodeError:
                raise WireError(
                    "the request body holds a lone UTF-16 surrogate (e.g. \\ud800), not text"
                ) from None
        return value


BODY_READER = web.AppKey("body_reader", BodyReader)
BODY_BYTES = web.RequestKey("body_bytes", int)
"""The size of the body `read_json` read, on the request."""


async def read_json(request: web.Request, convert: Callable[[Any], Any] | None = None) -> Any:
    """The request's JSON body, through its server's `BodyReader`, passed through `convert` when
    given (raises WireError)."""
    return await request.app[BODY_READER].read_json(request, convert)
