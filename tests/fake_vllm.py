"""A fake policy server that speaks vLLM's token routes, and fails on demand.

It answers `POST /v1/completions` the way vLLM 0.32 does with `return_token_ids: true` and
`logprobs: 0` (`choices[i].token_ids`, `choices[i].logprobs.token_logprobs`, `finish_reason`; see
`hermes_opd.vllm_api.wire_format.parse_generated`), plus `GET /health` and `GET /v1/models`. Each completions
request takes the next mode from `plan` (then `default`):

    ok          a normal answer: `reply(prompt_ids)` token ids, each with logprob -0.5
    500         HTTP 500
    slow        sleep `slow_s`, then answer (the client's per-request timeout fires first)
    drop        send the headers and half the body, then abort the connection
    truncated   HTTP 200 with a JSON body cut in half
    hang        never answer (until the process is killed; see `main`)

Faults a real vLLM will not produce on demand; the policy-fault tests point `AgenticOPDEnv` at it.
In-process: `async with FakeVLLM(...) as fake: fake.base_url`. As a process (to be SIGKILLed mid
request): `python -m tests.fake_vllm --port P --replies '[[ids...], ...]' --plan ok,ok,hang`; it
prints `READY` once listening and `REQUEST n MODE` as each completions request arrives.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
from collections.abc import Callable, Sequence

from aiohttp import web

MODES = ("ok", "500", "slow", "drop", "truncated", "hang")


class FakeVLLM:
    def __init__(
        self,
        reply: Callable[[list[int]], list[int]] | Sequence[Sequence[int]],
        *,
        plan: Sequence[str] = (),
        default: str = "ok",
        model: str = "fake-model",
        slow_s: float = 30.0,
        on_request: Callable[[int, str], None] | None = None,
    ) -> None:
        for mode in (*plan, default):
            if mode not in MODES:
                raise ValueError(f"unknown mode {mode!r}; expected one of {MODES}")
        self._reply = reply
        self.plan = list(plan)
        self.default = default
        self.model = model
        self.slow_s = slow_s
        self.on_request = on_request
        self.requests: list[str] = []
        """The mode used for each completions request, in arrival order."""
        self.prompts: list[list[int]] = []
        self.base_url = ""
        self.port = 0
        self._runner: web.AppRunner | None = None
        self._handlers: set[asyncio.Task] = set()

    # -- answers ---------------------------------------------------------------------------------
    def reply_ids(self, prompt_ids: list[int], index: int) -> list[int]:
        if callable(self._reply):
            return list(self._reply(prompt_ids))
        replies = list(self._reply)
        return list(replies[min(index, len(replies) - 1)])

    def _body(self, payload: dict, index: int) -> bytes:
        prompt = [int(t) for t in payload.get("prompt", [])]
        n = int(payload.get("n", 1))
        max_tokens = int(payload.get("max_tokens") or 16)
        choices = []
        for i in range(n):
            ids = self.reply_ids(prompt, index)
            finish = "stop"
            if len(ids) > max_tokens:
                ids, finish = ids[:max_tokens], "length"
            choices.append({
                "index": i, "text": "", "token_ids": ids, "finish_reason": finish,
                "logprobs": {"token_logprobs": [-0.5] * len(ids), "tokens": [], "top_logprobs": None},
            })  # fmt: skip
        body = {"id": f"cmpl-{index}", "object": "text_completion", "model": self.model, "choices": choices}
        return json.dumps(body).encode()

    async def completions(self, request: web.Request) -> web.StreamResponse:
        task = asyncio.current_task()
        if task is not None:
            self._handlers.add(task)
            task.add_done_callback(self._handlers.discard)
        index = len(self.requests)
        mode = self.plan[index] if index < len(self.plan) else self.default
        self.requests.append(mode)
        payload = await request.json()
        self.prompts.append(list(payload.get("prompt", [])))
        if self.on_request is not None:
            self.on_request(index, mode)
        if payload.get("model") != self.model:
            return web.json_response({"error": {"message": f"The model `{payload.get('model')}` does not exist."}},
                                     status=404)  # fmt: skip
        if mode == "500":
            return web.json_response({"error": {"message": "EngineCore died", "code": 500}}, status=500)
        if mode == "hang":
            await asyncio.sleep(3600)
        if mode == "slow":
            await asyncio.sleep(self.slow_s)
        body = self._body(payload, index)
        if mode == "truncated":
            return web.Response(body=body[: len(body) // 2], content_type="application/json")
        if mode == "drop":
            response = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
            response.content_length = len(body)
            await response.prepare(request)
            await response.write(body[: len(body) // 2])
            if request.transport is not None:
                request.transport.abort()
            return response
        return web.Response(body=body, content_type="application/json")

    async def health(self, request: web.Request) -> web.StreamResponse:
        return web.Response(text="")

    async def models(self, request: web.Request) -> web.StreamResponse:
        return web.json_response({"object": "list", "data": [{"id": self.model, "object": "model"}]})

    # -- lifecycle -------------------------------------------------------------------------------
    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1/completions", self.completions)
        app.router.add_get("/health", self.health)
        app.router.add_get("/v1/models", self.models)
        return app

    async def start(self, port: int = 0) -> FakeVLLM:
        self._runner = web.AppRunner(self.app(), handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", port)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        return self

    async def stop(self) -> None:
        """Stop listening and close every open connection (what a crash looks like to a client)."""
        for task in list(self._handlers):  # slow/hang handlers would hold the shutdown for their sleep
            task.cancel()
        if self._runner is not None:
            runner, self._runner = self._runner, None
            with contextlib.suppress(Exception):
                await runner.cleanup()

    async def __aenter__(self) -> FakeVLLM:
        return await self.start()

    async def __aexit__(self, *exc) -> None:
        await self.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--replies", required=True, help="JSON list of token-id lists, one per request")
    parser.add_argument("--plan", default="", help="comma-separated modes, one per completions request")
    parser.add_argument("--default", default="ok")
    parser.add_argument("--model", default="fake-model")
    args = parser.parse_args(argv)

    def announce(index: int, mode: str) -> None:
        print(f"REQUEST {index} {mode}", flush=True)

    fake = FakeVLLM(json.loads(args.replies), plan=[m for m in args.plan.split(",") if m],
                    default=args.default, model=args.model, on_request=announce)  # fmt: skip

    async def serve() -> None:
        await fake.start(args.port)
        print("READY", flush=True)
        await asyncio.Event().wait()

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve())
    return 0


if __name__ == "__main__":
    sys.exit(main())
