"""`POST /v1/messages` (`?beta=true`, `anthropic-version` and `anthropic-beta` are accepted and
change nothing): an Anthropic Messages request in (environments/proxy/messages/request.py), the
session's answer out, whole or as server-sent events (environments/proxy/messages/answer.py),
through the handler the wires share (environments/proxy/wire_handler.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web

from environments.proxy.messages.answer import MessageStream
from environments.proxy.messages.errors import error_body
from environments.proxy.messages.request import parse_request
from environments.proxy.wire_handler import wire_handler

if TYPE_CHECKING:
    from environments.proxy.turn_service import TurnService

PATH = "/v1/messages"


def add_routes(app: web.Application, service: TurnService) -> None:
    app.router.add_post(
        PATH, wire_handler(service, parse_request, lambda r: MessageStream(r.model), error_body)
    )
