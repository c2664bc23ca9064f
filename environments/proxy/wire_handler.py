"""The one aiohttp handler shape the Responses and Messages wires share: read the body, parse it
into a `Conversation`, ask the `TurnService`, and write its answer back whole or as server-sent
events through the wire's own event machine (`WireStream`).

The answer's first event is taken before the HTTP response is prepared, so a refusal is a proper
error status in the wire's error shape; after that, an error goes out as the wire's in-stream
error events. When the client is done or gone, the answer's generator is closed (which stops it).
Nothing but a `WireError` is turned into a response here: anything else is a bug, and aiohttp's
500 says so."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol

from aiohttp import web

from environments.proxy.conversation import AnswerStarted, Conversation, TurnDone, TurnEvent, WireError
from environments.proxy.request_body import read_json

if TYPE_CHECKING:
    from environments.proxy.turn_service import TurnService


class WireStream(Protocol):
    """A wire's event machine for one answer."""

    final: dict[str, Any] | None
    """The whole answer object, once `on` has seen the `TurnDone`."""

    def start(self, prompt_tokens: int) -> list[dict[str, Any]]: ...
    def on(self, event: TurnEvent) -> list[dict[str, Any]]: ...
    def fail(self, error: WireError) -> list[dict[str, Any]]: ...


def sse(event: dict[str, Any]) -> bytes:
    """One server-sent event named after the event's `type`."""
    return f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode()


async def _next(events: AsyncIterator[TurnEvent]) -> TurnEvent:
    try:
        return await anext(events)
    except StopAsyncIteration:
        raise WireError("the policy server gave no answer", "upstream") from None


async def _close(events: AsyncIterator[TurnEvent]) -> None:
    aclose = getattr(events, "aclose", None)
    if aclose is not None:
        with contextlib.suppress(Exception):
            await aclose()


def wire_handler(
    service: TurnService,
    parse: Callable[[Any], tuple[Any, Conversation]],
    new_stream: Callable[[Any], WireStream],
    error_body: Callable[[WireError], dict[str, Any]],
) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    """A handler for one wire: `parse` (body -> (request, conversation) or WireError),
    `new_stream` (request -> its event machine), `error_body` (the wire's error shape)."""

    def refuse(error: WireError) -> web.Response:
        return web.json_response(error_body(error), status=error.status)

    async def handle(request: web.Request) -> web.StreamResponse:
        try:
            parsed, conversation = await read_json(request, parse)
            caller = service.caller(request)
        except WireError as exc:
            service.counts["bad_requests"] += 1
            return refuse(exc)
        events = service.answer(conversation, caller)
        try:
            first = await _next(events)
        except WireError as exc:
            await _close(events)
            return refuse(exc)
        stream = new_stream(parsed)
        try:
            if not conversation.stream:
                event = first
                while True:
                    stream.on(event)
                    if isinstance(event, TurnDone):
                        return web.json_response(stream.final)
                    event = await _next(events)
            return await _streamed(request, stream, first, events)
        except WireError as exc:
            return refuse(exc)
        finally:
            await _close(events)

    return handle


async def _streamed(
    request: web.Request, stream: WireStream, first: TurnEvent, events: AsyncIterator[TurnEvent]
) -> web.StreamResponse:
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    await response.prepare(request)
    out = stream.start(first.prompt_tokens if isinstance(first, AnswerStarted) else 0)
    event = first
    try:
        while True:
            out += stream.on(event)
            await response.write(b"".join(sse(e) for e in out))
            out = []
            if isinstance(event, TurnDone):
                break
            event = await _next(events)
    except WireError as exc:
        await response.write(b"".join(sse(e) for e in out + stream.fail(exc)))
    await response.write_eof()
    return response
