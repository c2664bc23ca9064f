"""`POST /v1/messages` (`?beta=true`, `anthropic-version` and `anthropic-beta` are accepted and
change nothing): an Anthropic Messages request in (environments/proxy/messages/request.py), the
session's answer out, whole or as server-sent events (environments/proxy/messages/answer.py),
through the handler the wires share (environments/proxy/wire_handler.py).

`POST /v1/messages/count_tokens`: `{"input_tokens": N}`, the tokens of the prompt the same body
renders to, counted by the model's own chat template and tokenizer; no session is touched."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web

from environments.proxy.conversation import WireError
from environments.proxy.messages.answer import MessageStream
from environments.proxy.messages.errors import error_body
from environments.proxy.messages.request import parse_count_request, parse_request
from environments.proxy.request_body import read_json
from environments.proxy.wire_handler import wire_handler

if TYPE_CHECKING:
    from environments.proxy.turn_service import TurnService

PATH = "/v1/messages"


def add_routes(app: web.Application, service: TurnService) -> None:
    app.router.add_post(
        PATH, wire_handler(service, parse_request, lambda r: MessageStream(r.model), error_body)
    )

    async def count_tokens(request: web.Request) -> web.Response:
        try:
            conversation = await read_json(request, parse_count_request)
        except WireError as exc:
            service.counts["bad_requests"] += 1
            return web.json_response(error_body(exc), status=exc.status)
        try:
            tokens = await service.count_prompt_tokens(conversation, service.caller(request))
        except WireError as exc:
            return web.json_response(error_body(exc), status=exc.status)
        return web.json_response({"input_tokens": tokens})

    app.router.add_post(f"{PATH}/count_tokens", count_tokens)
