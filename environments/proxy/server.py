"""The proxy's HTTP side (aiohttp): `/v1/chat/completions`, `/v1/models`, `/v1/sessions/{id}`
(DELETE ends a session), `/health` and `/metrics`.

A request is rendered with the model's own chat template by the env's transcript recorder, sent to
vLLM as exact prompt ids (hermes_opd/vllm_api/client.py), and answered as soon as vLLM answers; the
exact sampled ids and logprobs stay in the session's record. The turn a request completes (its
next state just arrived) is handed to the background feed (environments/proxy/sample_feed.py)
with `put_nowait`: nothing on a request's path waits for a judge, a teacher or a sink."""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
import time
import uuid
from collections import Counter
from dataclasses import asdict, dataclass
from typing import Any

from aiohttp import web

from environments.delivery.policy_adapter import PolicyAdapterTracker, PolicyWeights
from environments.proxy.latency import LatencyWindow
from environments.proxy.openai_wire import (
    ChatRequest,
    RequestError,
    assistant_reply,
    comparable,
    completion_body,
    error_body,
    parse_request,
    stream_chunks,
    template_messages,
)
from environments.proxy.proxy_config import END_HEADER, SESSION_HEADER, TRAIN_HEADER, ProxyConfig
from environments.proxy.sample_feed import SampleFeed
from environments.proxy.sessions import HeldSession, SessionTable
from environments.proxy.turn_sample import TurnSample
from environments.rollout.agent_loop import assistant_message
from environments.rollout.tool_calls import parse_tool_calls
from hermes_opd.record.transcript_recorder import TranscriptRecorder
from hermes_opd.vllm_api.client import VLLMCompletionsClient
from hermes_opd.vllm_api.errors import BadRequestError, VLLMError
from hermes_opd.vllm_api.wire_format import GeneratedSequence

logger = logging.getLogger(__name__)

NO_TRAIN_VALUES = frozenset({"false", "0", "off", "no"})
OWNER = web.RequestKey("owner", str)
"""Whose sessions a request may touch: one name per API key."""
KEY_KIND = web.RequestKey("key_kind", str)
"""`train` or `serve` (a serve-only key)."""
OPEN = "open"
"""The owner of every session when the proxy takes no keys (loopback only)."""


def _error(status: int, message: str, kind: str = "invalid_request_error", param: str | None = None,
           code: str | None = None) -> web.Response:  # fmt: skip
    return web.json_response(error_body(message, kind, param, code), status=status)


@dataclass
class UpstreamTiming:
    """The seconds one request spent waiting for the policy server."""

    upstream_s: float = 0.0


class ProxyServer:
    """One proxy: the policy client, the session table, the live weights and the sample feed."""

    def __init__(self, config: ProxyConfig, tokenizer: Any, feed: SampleFeed | None,
                 client: VLLMCompletionsClient) -> None:  # fmt: skip
        self.config = config
        self.tokenizer = tokenizer
        self.feed = feed
        self.client = client
        self.sessions = SessionTable(tokenizer, config.max_sessions)
        self.tracker = PolicyAdapterTracker(client, config.policy_lora_prefix)
        self.weights = PolicyWeights(config.policy_model, 0)
        self.counts: Counter[str] = Counter()
        self.latency = LatencyWindow()
        self._keys = {k: "train" for k in config.api_keys} | {k: "serve" for k in config.serve_only_keys}
        self._tasks: list[asyncio.Task] = []
        self.app = web.Application(client_max_size=config.max_request_bytes, middlewares=[self._auth])
        self.app.add_routes([
            web.post("/v1/chat/completions", self.chat),
            web.get("/v1/models", self.models),
            web.delete("/v1/sessions/{session_id}", self.end_session),
            web.get("/health", self.health),
            web.get("/metrics", self.metrics),
        ])  # fmt: skip

    # -- lifecycle -----------------------------------------------------------------------------
    async def start_background(self) -> None:
        if self.config.policy_lora_prefix:
            self.weights = await self.tracker.current()
            self._tasks.append(asyncio.create_task(self._poll_adapters()))
        self._tasks.append(asyncio.create_task(self._expire_sessions()))
        if self.feed is not None:
            self.feed.start()

    async def stop_background(self, drain_s: float = 30.0) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(BaseException):
                await task
        for held in list(self.sessions.sessions.values()):
            self._end(held, "proxy_stopped")
        if self.feed is not None:
            await self.feed.stop(drain_s)
        await self.client.close()

    async def _poll_adapters(self) -> None:
        while True:
            await asyncio.sleep(self.config.adapter_poll_s)
            try:
                self.weights = await self.tracker.current()
            except Exception as exc:  # noqa: BLE001 - keep serving the weights we know
                logger.warning("adapter poll failed: %s", exc)

    async def _expire_sessions(self) -> None:
        while True:
            await asyncio.sleep(min(5.0, self.config.session_idle_s / 4))
            for held in self.sessions.expired(self.config.session_idle_s):
                self._end(held, "idle")

    def _end(self, held: HeldSession, why: str) -> None:
        """Forget a session; a turn still waiting for its next state ends without one (nothing to
        learn from it: no hint, no process reward), counted."""
        if held.state.waiting is not None:
            self.counts[f"turns_ended_without_next_state_{why}"] += 1
            held.state.waiting = None
        self.sessions.remove(held)
        self.counts[f"sessions_ended_{why}"] += 1

    # -- auth ----------------------------------------------------------------------------------
    @web.middleware
    async def _auth(self, request: web.Request, handler):
        if not self._keys or request.path == "/health":
            request[OWNER], request[KEY_KIND] = OPEN, "train"
            return await handler(request)
        header = request.headers.get("Authorization", "")
        given = header[7:].strip() if header.lower().startswith("bearer ") else ""
        for key, kind in self._keys.items():
            if given and hmac.compare_digest(given.encode(), key.encode()):
                request[OWNER] = "key-" + uuid.uuid5(uuid.NAMESPACE_OID, key).hex[:12]
                request[KEY_KIND] = kind
                return await handler(request)
        self.counts["unauthorized"] += 1
        return _error(401, "Incorrect API key provided." if given else "Missing API key: send Authorization: Bearer <key>.",
                      code="invalid_api_key")  # fmt: skip

    # -- routes --------------------------------------------------------------------------------
    async def models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [
            {"id": self.config.model_name, "object": "model", "created": 0, "owned_by": "hermes-opd"}]})  # fmt: skip

    async def health(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def metrics(self, request: web.Request) -> web.Response:
        body: dict[str, Any] = {"counts": dict(self.counts), "sessions": len(self.sessions.sessions),
                                "policy_model": self.weights.model, "policy_version": self.weights.version,
                                "latency": self.latency.summary()}  # fmt: skip
        if self.feed is not None:
            body["feed"] = {**asdict(self.feed.stats), "pending": self.feed.pending}
        return web.json_response(body)

    async def end_session(self, request: web.Request) -> web.Response:
        key = (request[OWNER], request.match_info["session_id"])
        held = self.sessions.sessions.get(key)
        if held is None:
            return _error(404, f"no session {key[1]!r}", code="session_not_found")
        async with held.lock:
            self._end(held, "ended")
        return web.json_response({"id": key[1], "object": "session", "deleted": True})

    async def chat(self, request: web.Request) -> web.StreamResponse:
        self.counts["requests"] += 1
        started = time.perf_counter()
        try:
            body = await request.json()
        except web.HTTPRequestEntityTooLarge:
            return _error(
                413, f"request body over {self.config.max_request_bytes} bytes", code="request_too_large"
            )
        except (json.JSONDecodeError, UnicodeDecodeError):
            return _error(400, "the request body is not valid JSON")
        try:
            chat = parse_request(body)
        except RequestError as exc:
            self.counts["bad_requests"] += 1
            return _error(exc.status, str(exc), exc.kind, exc.param, exc.code)
        if chat.model != self.config.model_name:
            return _error(404, f"The model {chat.model!r} does not exist; this proxy serves {self.config.model_name!r}.",
                          param="model", code="model_not_found")  # fmt: skip
        timing = UpstreamTiming()
        try:
            reply, finish, usage = await self._answer(request, chat, timing)
        except BadRequestError as exc:
            return _error(400, str(exc))
        except VLLMError as exc:
            self.counts["policy_errors"] += 1
            return _error(502, f"the policy server failed: {exc}", kind="api_error")
        completion_id = f"chatcmpl-{uuid.uuid4().hex}"
        if not chat.stream:
            response = web.json_response(completion_body(completion_id, chat.model, reply, finish, *usage))
            self.latency.add(time.perf_counter() - started, timing.upstream_s)
            return response
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await response.prepare(request)
        for chunk in stream_chunks(
            completion_id, chat.model, reply, finish, usage if chat.include_usage else None
        ):
            await response.write(f"data: {json.dumps(chunk)}\n\n".encode())
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        self.latency.add(time.perf_counter() - started, timing.upstream_s)
        return response

    # -- answering -----------------------------------------------------------------------------
    def _trainable(self, request: web.Request) -> bool:
        wanted = request.headers.get(TRAIN_HEADER, "true").strip().lower() not in NO_TRAIN_VALUES
        return self.config.train and self.feed is not None and wanted and request[KEY_KIND] == "train"

    async def _answer(
        self, request: web.Request, chat: ChatRequest, timing: UpstreamTiming
    ) -> tuple[dict[str, Any], str, tuple[int, int]]:
        header_id = request.headers.get(SESSION_HEADER) or None
        if request[KEY_KIND] == "serve" or not self.config.train:
            self.counts["served_only"] += 1
            return await self._answer_untracked(chat, timing)
        held, _ = self.sessions.resolve(request[OWNER], header_id, chat.messages)
        async with held.lock:
            held.last_used = time.monotonic()
            if not self._trainable(request):
                # An opt-out: none of this request may enter a sample, and it is now part of the
                # session's history, so the session is never trained again.
                held.state.private = True
                held.state.waiting = None
                self.counts["not_for_training"] += 1
            if held.state.private:
                reply, finish, usage = await self._answer_untracked(chat, timing)
                # kept as a tombstone (no record), found again by header or by history, never trained
                held.state.recorder = None
                held.state.expected = [comparable(m) for m in chat.messages] + [comparable(reply)]
                self.sessions.remember_history(held)
                return reply, finish, usage
            out = await self._answer_in_session(held, chat, timing)
            if request.headers.get(END_HEADER, "").strip().lower() in {"true", "1", "yes"}:
                self._end(held, "ended")
            return out

    async def _generate(
        self, context: list[int], chat: ChatRequest, timing: UpstreamTiming, *, recorded: bool
    ) -> tuple[GeneratedSequence, PolicyWeights]:
        """Sample the reply; `recorded`: a turn that may be trained on, so the sampler's logprobs
        come with it (an answer never recorded asks for none: vLLM answers later with them)."""
        weights = self.weights
        max_tokens = chat.max_tokens or self.config.default_max_tokens
        extra = {"model": weights.model} if weights.model != self.client.model else None
        started = time.perf_counter()
        try:
            generated = await self.client.generate(context, max_tokens=max_tokens, temperature=chat.temperature,
                                                   top_p=chat.top_p, seed=chat.seed, stop=chat.stop or None,
                                                   extra=extra, sampled_logprobs=recorded)  # fmt: skip
        finally:
            timing.upstream_s += time.perf_counter() - started
        return generated[0], weights

    def _reply(self, generated: GeneratedSequence, chat: ChatRequest) -> tuple[dict, dict, str, str]:
        """(OpenAI reply, the recorder's structured message, the raw text, the finish reason)."""
        ids = list(generated.token_ids)
        if ids and ids[-1] == self.tokenizer.eos_token_id:
            ids = ids[:-1]
        raw = self.tokenizer.decode(ids, skip_special_tokens=False)
        finish = "length" if generated.finish_reason == "length" else "stop"
        if not chat.tools or chat.tool_choice == "none":
            text = self.tokenizer.decode(ids, skip_special_tokens=True)
            return assistant_reply(text, []), {"role": "assistant", "content": text}, raw, finish
        parsed = parse_tool_calls(raw, chat.tool_names)
        if not parsed.calls:
            text = self.tokenizer.decode(ids, skip_special_tokens=True)
            return assistant_reply(text, []), {"role": "assistant", "content": text}, raw, finish
        valid = parsed.valid_calls
        content = "\n".join([parsed.content, *(e.raw for e in parsed.errors)]).strip()
        reply = assistant_reply(content, [(c.id, c.name, c.arguments) for c in valid])
        return reply, assistant_message(content, valid), raw, "tool_calls" if valid else finish

    async def _answer_untracked(
        self, chat: ChatRequest, timing: UpstreamTiming
    ) -> tuple[dict[str, Any], str, tuple[int, int]]:
        recorder = TranscriptRecorder(self.tokenizer, chat.tools)
        context = recorder.start(template_messages(chat.messages))  # ~1 ms: cheaper than a thread hop
        generated, _ = await self._generate(context, chat, timing, recorded=False)
        reply, _, _, finish = self._reply(generated, chat)
        return reply, finish, (len(context), len(generated.token_ids))

    async def _answer_in_session(
        self, held: HeldSession, chat: ChatRequest, timing: UpstreamTiming
    ) -> tuple[dict[str, Any], str, tuple[int, int]]:
        state = held.state
        prepared = state.prepare(chat.messages, chat.tools)  # ~1 ms of rendering: inline, no thread hop
        if prepared.forked not in (None, "new"):
            self.counts[f"forks_{prepared.forked}"] += 1
        if prepared.dropped_turn:
            self.counts["turns_dropped_history_changed"] += 1
        if prepared.finished is not None:
            trajectory, (turn, model, version) = prepared.finished
            self.feed.submit(TurnSample(trajectory, state.session_id, turn, model, version))
        context = prepared.context
        generated, weights = await self._generate(context, chat, timing, recorded=True)
        reply, message, raw, finish = self._reply(generated, chat)
        trained_turns = state.turn_count
        if len(context) + len(generated.token_ids) > self.config.max_sample_tokens or (
            trained_turns >= self.config.max_trained_turns_per_session
        ):
            self.counts["turns_over_session_limits"] += 1
            state.expected = []  # served, not recorded: the next request starts a new record
            state.waiting = None
        else:
            state.record_reply(
                chat.messages, generated, message, raw, reply, (weights.model, weights.version)
            )
            self.sessions.remember_history(held)
        return reply, finish, (len(context), len(generated.token_ids))


async def run_app(server: ProxyServer, host: str, port: int) -> web.AppRunner:
    """Start serving; returns the runner (its `cleanup()` stops the site)."""
    runner = web.AppRunner(server.app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    await server.start_background()
    return runner
