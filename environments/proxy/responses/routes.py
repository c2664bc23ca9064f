"""`POST /v1/responses`: a Responses request in (environments/proxy/responses/request.py), the
session's answer out, whole or as server-sent events (environments/proxy/responses/answer.py),
through the handler the wires share (environments/proxy/wire_handler.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web

from environments.proxy.responses.answer import ResponseStream
from environments.proxy.responses.errors import error_body
from environments.proxy.responses.request import parse_request
from environments.proxy.wire_handler import wire_handler

if TYPE_CHECKING:
    from environments.proxy.turn_service import TurnService

PATH = "/v1/responses"


def add_routes(app: web.Application, service: TurnService) -> None:
    app.router.add_post(PATH, wire_handler(service, parse_request, ResponseStream, error_body))
