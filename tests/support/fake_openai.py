"""A fake OpenAI-compatible judge server (aiohttp) and its fixture."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web

from judge.parsing import HINT_END, HINT_START

HINT = "Read config.yaml first: the key is `server.port`, not `port`."


POSITIVE = f"The KeyError shows the wrong key.\n\\boxed{{1}}\n{HINT_START}{HINT}{HINT_END}"


Action = Callable[[web.Request], Awaitable[web.StreamResponse]]


def completion(text: str | None) -> dict[str, Any]:
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": "fake-judge",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": "stop",
                "logprobs": None,
            }
        ],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }


@dataclass
class FakeOpenAI:
    """Answers each request with the next scripted action, then with `default`."""

    base_url: str = ""
    actions: list[Action] = field(default_factory=list)
    default: Action | None = None
    requests: list[tuple[float, dict[str, Any]]] = field(default_factory=list)
    release: asyncio.Event = field(default_factory=asyncio.Event)

    def reply(self, text: str | None) -> Action:
        async def action(request: web.Request) -> web.StreamResponse:
            return web.json_response(completion(text))

        return action

    def status(self, code: int, headers: dict[str, str] | None = None) -> Action:
        async def action(request: web.Request) -> web.StreamResponse:
            body = {"error": {"message": f"fake status {code}", "type": "fake", "code": code}}
            return web.json_response(body, status=code, headers=headers)

        return action

    def hang(self, text: str = POSITIVE) -> Action:
        async def action(request: web.Request) -> web.StreamResponse:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.release.wait(), timeout=30)
            return web.json_response(completion(text))

        return action

    def not_json(self) -> Action:
        async def action(request: web.Request) -> web.StreamResponse:
            return web.Response(text="<html>proxy error</html>", content_type="text/html")

        return action

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.requests.append((time.monotonic(), await request.json()))
        action = self.actions.pop(0) if self.actions else self.default
        assert action is not None
        return await action(request)

    def gaps(self) -> list[float]:
        times = [t for t, _ in self.requests]
        return [b - a for a, b in zip(times, times[1:], strict=False)]


@pytest.fixture
async def fake_server():
    fake = FakeOpenAI()
    fake.default = fake.reply(POSITIVE)
    app = web.Application()
    app.router.add_post("/v1/chat/completions", fake.handle)
    runner = web.AppRunner(app, shutdown_timeout=1.0)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    fake.base_url = f"http://127.0.0.1:{port}/v1"
    yield fake
    fake.release.set()
    await runner.cleanup()
