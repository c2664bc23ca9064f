"""A stand-in for the proxy's TurnService (environments/proxy/turn_service.py) with the API the
wires use, to test a wire's HTTP route alone: `caller`, and `answer` yielding the events it was
given (or refusing before the first, or failing after `fail_after` of them)."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from typing import Any

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from environments.proxy.conversation import Caller, Conversation, WireError
from environments.proxy.request_body import BODY_READER, BodyLimits, BodyReader


class FakeService:
    """The TurnService API the wires use: `caller`, and `answer` yielding events (or refusing)."""

    def __init__(self, events: list, refuse: WireError | None = None, fail_after: int | None = None) -> None:
        self.events = events
        self.refuse = refuse
        self.fail_after = fail_after
        self.seen: list[Conversation] = []
        self.closed = False
        self.counts: Counter[str] = Counter()

    def caller(self, request: web.Request) -> Caller:
        return Caller(owner="open", may_train=True, session_id=request.headers.get("session-id"))

    async def answer(self, conversation: Conversation, caller: Caller):
        self.seen.append(conversation)
        if self.refuse is not None:
            raise self.refuse
        try:
            for index, event in enumerate(self.events):
                if index == self.fail_after:
                    raise WireError("the policy server failed", "upstream")
                yield event
        finally:
            self.closed = True


async def client_for(add_routes: Callable[[web.Application, Any], None], service: FakeService) -> TestClient:
    """A test client of an app that has only one wire's routes, over `service`."""
    app = web.Application()
    app[BODY_READER] = BodyReader(BodyLimits())
    add_routes(app, service)
    client = TestClient(TestServer(app))
    await client.start_server()
    return client


def sse_events(text: str) -> list[dict[str, Any]]:
    """The events of a server-sent event stream; each event's name must be its `type`."""
    out = []
    for block in text.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines())
        event = json.loads(lines["data"])
        assert lines["event"] == event["type"]
        out.append(event)
    return out
