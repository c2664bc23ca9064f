"""The proxy's HTTP side (aiohttp), kept thin: API keys, `/health`, `/metrics` (Prometheus text;
the same as JSON at `/metrics.json`), `/v1/models`,
`DELETE /v1/sessions/{id}`, and every wire's routes (one folder per wire: chat_completions/,
responses/, messages/), which read their bodies through request_body.py and answer through the
one `TurnService` (environments/proxy/turn_service.py). An unknown path or method gets a JSON
error in the shape of the wire the path belongs to (Anthropic's under `/v1/messages`, OpenAI's
everywhere else), never aiohttp's HTML page."""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import uuid
from collections import Counter
from dataclasses import asdict
from typing import Any

from aiohttp import web

from environments.delivery.policy_adapter import PolicyWeights
from environments.proxy.chat_completions.response import error_body
from environments.proxy.chat_completions.routes import add_routes as add_chat_completions
from environments.proxy.conversation import WireError
from environments.proxy.memory_return import BYTES_PER_HELD_TOKEN, FreedMemoryReturn
from environments.proxy.messages.routes import add_routes as add_messages
from environments.proxy.proxy_config import ProxyConfig
from environments.proxy.request_body import BODY_READER, BodyLimits, BodyReader
from environments.proxy.responses.routes import add_routes as add_responses
from environments.proxy.sample_feed import SampleFeed
from environments.proxy.sessions import SessionTable
from environments.proxy.turn_service import KEY_KIND, OPEN, OWNER, TurnService
from hermes_opd.runtime.prometheus import CONTENT_TYPE as PROMETHEUS_CONTENT_TYPE
from hermes_opd.runtime.prometheus import render_proxy_metrics
from hermes_opd.vllm_api.client import VLLMCompletionsClient

ANTHROPIC_PREFIX = "/v1/messages"


def error_response(path: str, error: WireError) -> web.Response:
    """`error` in the shape of the wire `path` belongs to."""
    if path == ANTHROPIC_PREFIX or path.startswith(ANTHROPIC_PREFIX + "/"):
        kinds = {
            "authentication": "authentication_error",
            "permission": "permission_error",
            "not_found": "not_found_error",
            "too_large": "request_too_large",
            "overloaded": "overloaded_error",
            "upstream": "api_error",
        }
        body: dict[str, Any] = {
            "type": "error",
            "error": {"type": kinds.get(error.kind, "invalid_request_error"), "message": error.message},
        }
        return web.json_response(body, status=error.status)
    return web.json_response(error_body(error), status=error.status)


class ProxyServer:
    """One proxy: its HTTP app in front of its `TurnService`."""

    def __init__(
        self, config: ProxyConfig, tokenizer: Any, feed: SampleFeed | None, client: VLLMCompletionsClient
    ) -> None:
        self.config = config
        self.service = TurnService(config, tokenizer, feed, client)
        self._keys = {k: "train" for k in config.api_keys} | {k: "serve" for k in config.serve_only_keys}
        self.app = web.Application(
            client_max_size=config.max_request_bytes, middlewares=[self._errors, self._auth]
        )
        self.body_reader = BodyReader(
            BodyLimits(
                max_bytes=config.max_request_bytes,
                max_depth=config.max_request_depth,
                read_timeout_s=config.body_read_timeout_s,
                max_bytes_in_flight=config.max_bytes_in_flight,
            ),
            self.service.planner,
        )
        self.app[BODY_READER] = self.body_reader
        self.memory_return = FreedMemoryReturn(self.service.planner, self._large_work_finished)
        self._memory_task: asyncio.Task | None = None
        self.app.router.add_get("/v1/models", self.models)
        self.app.router.add_delete("/v1/sessions/{session_id}", self.end_session)
        self.app.router.add_get("/health", self.health)
        self.app.router.add_get("/metrics", self.metrics)
        self.app.router.add_get("/metrics.json", self.metrics_json)
        add_chat_completions(self.app, self.service)
        add_responses(self.app, self.service)
        add_messages(self.app, self.service)

    # -- what tests, build and the command reach through ---------------------------------------
    @property
    def feed(self) -> SampleFeed | None:
        return self.service.feed

    @property
    def client(self) -> VLLMCompletionsClient:
        return self.service.client

    @property
    def sessions(self) -> SessionTable:
        return self.service.table

    @property
    def weights(self) -> PolicyWeights:
        return self.service.weights

    @weights.setter
    def weights(self, value: PolicyWeights) -> None:
        self.service.weights = value

    @property
    def latency(self):  # noqa: ANN201 - LatencyWindow
        return self.service.latency

    @property
    def counts(self) -> Counter[str]:
        """The service's counts and the session table's, together."""
        return self.service.counts + self.service.table.counts

    async def start_background(self) -> None:
        await self.service.start_background()
        self._memory_task = asyncio.create_task(self.memory_return.run())

    async def stop_background(self, drain_s: float = 30.0) -> None:
        if self._memory_task is not None:
            self._memory_task.cancel()
            with contextlib.suppress(BaseException):
                await self._memory_task
        await self.service.stop_background(drain_s)

    def _large_work_finished(self) -> int:
        """Bytes of large bodies handled and of ended sessions' records, so far."""
        return self.body_reader.large_bytes_done + self.sessions.tokens_released * BYTES_PER_HELD_TOKEN

    # -- middleware ----------------------------------------------------------------------------
    @web.middleware
    async def _errors(self, request: web.Request, handler):
        """aiohttp's own refusals (404, 405, 413 from its body limit) as JSON in the wire's shape."""
        try:
            return await handler(request)
        except WireError as exc:
            return error_response(request.path, exc)
        except web.HTTPNotFound:
            return error_response(
                request.path,
                WireError(f"no route {request.method} {request.path[:200]}", "not_found", code="unknown_url"),
            )
        except web.HTTPMethodNotAllowed as exc:
            return error_response(
                request.path,
                WireError(
                    f"{request.method} is not allowed on {request.path[:200]}; allowed: {', '.join(sorted(exc.allowed_methods))}",
                    "method_not_allowed",
                ),
            )
        except web.HTTPRequestEntityTooLarge:
            return error_response(
                request.path,
                WireError(
                    f"request body over {self.config.max_request_bytes} bytes",
                    "too_large",
                    code="request_too_large",
                ),
            )

    @web.middleware
    async def _auth(self, request: web.Request, handler):
        if not self._keys or request.path == "/health":
            request[OWNER], request[KEY_KIND] = OPEN, "train"
            return await handler(request)
        given = request.headers.get("Authorization", "")
        given = (
            given[7:].strip()
            if given.lower().startswith("bearer ")
            else request.headers.get("x-api-key", "").strip()
        )
        for key, kind in self._keys.items():
            if given and hmac.compare_digest(given.encode(), key.encode()):
                request[OWNER] = "key-" + uuid.uuid5(uuid.NAMESPACE_OID, key).hex[:12]
                request[KEY_KIND] = kind
                return await handler(request)
        self.service.counts["unauthorized"] += 1
        message = (
            "Incorrect API key provided." if given else "Missing API key: send Authorization: Bearer <key>."
        )
        return error_response(request.path, WireError(message, "authentication", code="invalid_api_key"))

    # -- routes --------------------------------------------------------------------------------
    async def models(self, request: web.Request) -> web.Response:
        return web.json_response(
            {
                "object": "list",
                "data": [
                    {"id": self.config.model_name, "object": "model", "created": 0, "owned_by": "hermes-opd"}
                ],
            }
        )

    async def health(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    def metrics_snapshot(self) -> dict[str, Any]:
        """Everything `/metrics` exposes, as one dict (also served as JSON at `/metrics.json`)."""
        service = self.service
        body: dict[str, Any] = {
            "counts": dict(self.counts),
            "sessions": len(service.table),
            "tokens_held": service.table.tokens_held,
            "policy_model": service.weights.model,
            "policy_version": service.weights.version,
            "latency": service.latency.summary(),
        }
        if service.feed is not None:
            body["feed"] = {**asdict(service.feed.stats), "pending": service.feed.pending}
            body["counts"].update(service.feed.judge_feedback_counts())
        return body

    async def metrics(self, request: web.Request) -> web.Response:
        """Prometheus text exposition, as vLLM's own `/metrics` (hermes_opd/runtime/prometheus.py)."""
        text = render_proxy_metrics(self.metrics_snapshot())
        return web.Response(body=text.encode(), headers={"Content-Type": PROMETHEUS_CONTENT_TYPE})

    async def metrics_json(self, request: web.Request) -> web.Response:
        return web.json_response(self.metrics_snapshot())

    async def end_session(self, request: web.Request) -> web.Response:
        session_id = request.match_info["session_id"]
        if not await self.service.end_session(request[OWNER], session_id):
            raise WireError(f"no session {session_id[:200]!r}", "not_found", code="session_not_found")
        return web.json_response({"id": session_id, "object": "session", "deleted": True})


async def run_app(server: ProxyServer, host: str, port: int) -> web.AppRunner:
    """Start serving; returns the runner (its `cleanup()` stops the site)."""
    # aiohttp's keep-alive timer runs from the connection's start until a whole request has come,
    # so it is also the header timeout: a client trickling its headers is cut off after it
    runner = web.AppRunner(server.app, access_log=None, keepalive_timeout=server.config.header_read_timeout_s)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    await server.start_background()
    return runner
