"""`POST /v1/chat/completions`: read the body (bounded), parse it into a `Conversation`, and relay
the turn service's events as one `chat.completion` or as `chat.completion.chunk` events while
vLLM samples them. A refusal before the first event is an HTTP error in the OpenAI shape; a
failure after it is one error event on the stream."""

from __future__ import annotations

import contextlib
import uuid
from typing import TYPE_CHECKING, Any

from aiohttp import web

from environments.proxy.chat_completions.request import parse_request
from environments.proxy.chat_completions.response import ChunkWriter, completion_body, error_body
from environments.proxy.conversation import ContentDelta, ReasoningDelta, TokenLogprobs, TurnDone, WireError
from environments.proxy.request_body import read_json

if TYPE_CHECKING:
    from environments.proxy.turn_service import TurnService


def error_response(error: WireError) -> web.Response:
    return web.json_response(error_body(error), status=error.status)


def add_routes(app: web.Application, service: TurnService) -> None:
    async def chat(request: web.Request) -> web.StreamResponse:
        try:
            conversation, include_usage = await read_json(request, parse_request)
            caller = service.caller(request)
        except WireError as exc:
            service.counts["bad_requests"] += 1
            return error_response(exc)
        events = service.answer(conversation, caller)
        try:
            try:
                first = await anext(events)
            except WireError as exc:
                return error_response(exc)
            completion_id = f"chatcmpl-{uuid.uuid4().hex}"
            asked = conversation.logprobs is not None
            if not conversation.stream:
                entries: list[dict[str, Any]] = []
                event = first
                while not isinstance(event, TurnDone):
                    if isinstance(event, TokenLogprobs):
                        entries += event.entries
                    try:
                        event = await anext(events)
                    except WireError as exc:
                        return error_response(exc)
                body = completion_body(
                    completion_id, conversation.model, event.turn, entries if asked else None
                )
                return web.json_response(body)
            writer = ChunkWriter(completion_id, conversation.model, logprobs=asked)
            response = web.StreamResponse(
                headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
            )
            await response.prepare(request)
            try:
                await response.write(writer.role())
                event = first
                while True:
                    if isinstance(event, ContentDelta):
                        await response.write(writer.content(event.text))
                    elif isinstance(event, ReasoningDelta):
                        await response.write(writer.reasoning(event.text))
                    elif isinstance(event, TokenLogprobs):
                        writer.add_logprobs(event.entries)
                    elif isinstance(event, TurnDone):
                        await response.write(writer.end(event.turn, include_usage))
                        break
                    try:
                        event = await anext(events)
                    except WireError as exc:
                        await response.write(writer.error(exc))
                        break
                await response.write_eof()
            except ConnectionError:
                # the client left mid-answer: closing `events` (below) stops vLLM's stream, and the
                # session, never committed, stays as it was
                service.counts["clients_gone_mid_answer"] += 1
            return response
        finally:
            with contextlib.suppress(Exception):
                await events.aclose()

    app.router.add_post("/v1/chat/completions", chat)
