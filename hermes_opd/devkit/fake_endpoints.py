"""The project's one fake OpenAI/vLLM endpoint: a remote-like judge and teacher with fixed
latencies (benchmarks) and a policy server that fails on demand (fault tests).

Routes (one aiohttp app on 127.0.0.1, `FakeVLLM` in-process or `FakeEndpoints` in its own process,
so that building multi-megabyte teacher bodies never competes with the measured client):
- `POST /v1/chat/completions` (the judge): after `judge_latency_s`, a chat completion whose text is a
  positive vote with a hint (`\\boxed{1}` and `[HINT_START] ... [HINT_END]`).
- `POST /v1/completions` with `prompt_logprobs: K` (the remote-like teacher): after
  `teacher_latency_s`, a body in vLLM 0.32's exact format: `choices[0].prompt_logprobs` as long as
  the prompt, entry 0 null, every other entry an object keyed by token id (as a string) with
  `{"logprob", "rank", "decoded_token"}`, the actual prompt token FIRST (with its own rank), then the
  top-K in rank order (K keys when the actual token is among them, else K+1). Logprobs are float32
  values printed the way vLLM prints them (the float64 repr), from a Zipf distribution over the
  vocabulary, so each row is one proper distribution. The body is assembled from pre-rendered
  fragments (a few milliseconds), the latency is counted from the request's arrival, and bodies of
  repeated prompts are cached, so on a small machine the fake costs the measured client little CPU,
  as a remote server would.
- `POST /inference/v1/generate` with `sampling_params.prompt_logprobs` (vLLM's scale-out route): the
  same rows at the top level, `decoded_token: null`; with `scale_out=False` the 403 vLLM 0.32 gives
  when started without `--enable-scale-out`.
- `POST /v1/completions` without `prompt_logprobs` (the policy): vLLM 0.32's answer to
  `return_token_ids: true, logprobs: 0` (`choices[i].token_ids`, `choices[i].logprobs.token_logprobs`,
  `finish_reason`), the ids from `reply`, each with logprob -0.5.
- Faults a real vLLM will not produce on demand: each completions/generate request takes the next
  mode of `plan` (then `default`), see `MODES`.
- `GET /health`, `GET /v1/models`; `GET /stats`, `POST /stats/reset`: request counts and the maximum
  number of requests in flight at once, per route (tests use it to prove that a schedule really is
  sequential).

As a process: `python -m hermes_opd.devkit.fake_endpoints --port 0` prints `PORT <n>` when ready
(`--replies`, `--plan`, `--default`, `--model`, `--announce-requests` for the policy-fault tests,
which SIGKILL it mid-request; it then prints `REQUEST n MODE` as each request arrives).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import random
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web

DEFAULT_HINT = (
    "Before editing, run the failing test on its own and read the traceback: the error names the "
    "exact line and the value that was wrong, so fix that and rerun the test."
)
JUDGE_TEXT = (
    "The tool output reveals information the assistant lacked when it acted. "
    "\\boxed{{1}}\n[HINT_START]{hint}[HINT_END]"
)
MAX_K = 100
CACHE_ENTRIES = 256
MODES = ("ok", "500", "slow", "drop", "truncated", "hang")
"""Fault modes of a completions/generate request: `ok`; `500` (HTTP 500); `slow` (sleep `slow_s`,
then answer); `drop` (headers and half the body, then the connection is aborted); `truncated` (200
with half a JSON body); `hang` (never answer until the process is killed)."""


@dataclass
class FakeSettings:
    judge_latency_s: float = 0.3
    teacher_latency_s: float = 0.15
    vocab_size: int = 4096
    tokenizer_dir: str | None = None
    """When set, `decoded_token` strings are the tokenizer's own (else short synthetic strings)."""
    hint: str = DEFAULT_HINT
    variants: int = 16
    """Distinct top-K id sets; each position picks one from its previous token and its index."""
    zipf_s: float = 1.1


@dataclass
class RouteStats:
    count: int = 0
    in_flight: int = 0
    max_in_flight: int = 0
    bytes_out: int = 0

    def enter(self) -> None:
        self.count += 1
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)

    def leave(self) -> None:
        self.in_flight -= 1


@dataclass
class _Stats:
    teacher: RouteStats = field(default_factory=RouteStats)
    judge: RouteStats = field(default_factory=RouteStats)
    generation: RouteStats = field(default_factory=RouteStats)


def vllm_float(value: float) -> str:
    """How vLLM prints a float32 logprob: the repr of the float64 it becomes (e.g. -1.409581184387207)."""
    import numpy as np

    return repr(float(np.float32(value)))


class TeacherBodyBuilder:
    """Renders vLLM prompt-logprobs bodies for any prompt quickly, from pre-rendered fragments.

    `detokenize=False` renders `decoded_token: null`, as vLLM's generate route does with
    `sampling_params.detokenize: false`."""

    def __init__(self, settings: FakeSettings, detokenize: bool = True) -> None:
        vocab = settings.vocab_size
        self.vocab = vocab
        self.variants = settings.variants
        self.decoded = _decoded_tokens(vocab, settings.tokenizer_dir) if detokenize else ["null"] * vocab
        weights = [r ** (-settings.zipf_s) for r in range(1, vocab + 1)]
        total = math.fsum(weights)
        self.rank_logprob = [vllm_float(math.log(w / total)) for w in weights]  # index = rank - 1
        rng = random.Random(0)
        self.variant_ids: list[list[int]] = []
        for _ in range(self.variants):
            perm = list(range(vocab))
            rng.shuffle(perm)
            self.variant_ids.append(perm[: min(MAX_K, vocab)])
        self._joined: dict[tuple[int, int], tuple[str, dict[int, str]]] = {}

    def _fragment(self, token: int, rank: int) -> str:
        return f'"{token}":{{"logprob":{self.rank_logprob[rank - 1]},"rank":{rank},"decoded_token":{self.decoded[token % self.vocab]}}}'

    def _variant(self, v: int, k: int) -> tuple[str, dict[int, str]]:
        key = (v, k)
        if key not in self._joined:
            ids = self.variant_ids[v][:k]
            frags = {tok: self._fragment(tok, rank) for rank, tok in enumerate(ids, start=1)}
            self._joined[key] = (",".join(frags.values()), frags)
        return self._joined[key]

    def entry(self, prompt_ids: list[int], pos: int, k: int) -> str:
        actual = prompt_ids[pos]
        v = (prompt_ids[pos - 1] * 2654435761 + pos) % self.variants
        joined, frags = self._variant(v, k)
        own = frags.get(actual)
        if own is not None:  # the actual token is in the top-K: it comes first, K keys in all
            rest = joined.replace(own + ",", "", 1) if not joined.endswith(own) else joined[: -len(own) - 1]
            return "{" + own + ("," + rest if rest else "") + "}"
        rank = k + 1 + (actual * 7919 + pos) % max(1, self.vocab - k - 1)
        return "{" + self._fragment(actual, rank) + "," + joined + "}"

    def body(self, prompt_ids: list[int], k: int, model: str) -> bytes:
        """A `/v1/completions` body."""
        entries = self._entries(prompt_ids, k)
        n = len(prompt_ids)
        return (
            '{"id":"cmpl-fake","object":"text_completion","created":'
            + str(int(time.time()))
            + ',"model":'
            + json.dumps(model)
            + ',"choices":[{"index":0,"text":" x","logprobs":null,"finish_reason":"length","stop_reason":null,'
            '"token_ids":null,"prompt_logprobs":['
            + ",".join(entries)
            + '],"prompt_token_ids":null,"routed_experts":null}],"service_tier":null,'
            '"system_fingerprint":"fake-vllm","usage":{"prompt_tokens":'
            + str(n)
            + ',"total_tokens":'
            + str(n + 1)
            + ',"completion_tokens":1,"prompt_tokens_details":null,"completion_tokens_details":null},'
            '"kv_transfer_params":null,"ec_transfer_params":null,"metrics":null}'
        ).encode()

    def generate_body(self, prompt_ids: list[int], k: int, model: str) -> bytes:
        """An `/inference/v1/generate` body (rows at the top level, token ids, no text)."""
        entries = self._entries(prompt_ids, k)
        n = len(prompt_ids)
        return (
            '{"request_id":"generate-tokens-fake","model":'
            + json.dumps(model)
            + ',"created":'
            + str(int(time.time()))
            + ',"usage":{"prompt_tokens":'
            + str(n)
            + ',"total_tokens":'
            + str(n + 1)
            + ',"completion_tokens":1},"prompt_logprobs":['
            + ",".join(entries)
            + '],"prompt_token_id_logprobs":null,"prompt_token_ids":null,"output_mode":"tokens",'
            '"choices":[{"index":0,"finish_reason":"length","token_ids":[0],"logprobs":null}]}'
        ).encode()

    def _entries(self, prompt_ids: list[int], k: int) -> list[str]:
        if not 1 <= k <= MAX_K:
            raise ValueError(f"prompt_logprobs must be in [1, {MAX_K}]")
        return ["null"] + [self.entry(prompt_ids, pos, k) for pos in range(1, len(prompt_ids))]


def _decoded_tokens(vocab: int, tokenizer_dir: str | None) -> list[str]:
    """JSON-encoded `decoded_token` string per id."""
    if tokenizer_dir:
        from tokenizers import Tokenizer

        tokenizer = Tokenizer.from_file(str(Path(tokenizer_dir) / "tokenizer.json"))
        return [json.dumps(tokenizer.decode([i], skip_special_tokens=False)) for i in range(vocab)]
    rng = random.Random(1)
    letters = "etaoinshrdlcumwfgypbvkjxqz_ ."
    return [
        json.dumps("".join(rng.choice(letters) for _ in range(1 + rng.randrange(6)))) for _ in range(vocab)
    ]


class FakeVLLM:
    """The fake server, in-process: `async with FakeVLLM(...) as fake: fake.base_url`.

    `reply`: generated ids per `/v1/completions` request without `prompt_logprobs` (a callable of
    the prompt ids, or a list with one entry per request, the last repeated). `plan`/`default`: the
    fault mode of each completions/generate request, in arrival order (`MODES`). `settings`:
    latencies, vocabulary and hint of the teacher and judge routes. `scale_out`: serve
    `/inference/v1/generate` (else it is a 404, as on a vLLM started without `--enable-scale-out`).
    """

    def __init__(
        self,
        reply: Callable[[list[int]], list[int]] | Sequence[Sequence[int]] = ((0,),),
        *,
        plan: Sequence[str] = (),
        default: str = "ok",
        model: str | None = "fake-model",
        slow_s: float = 30.0,
        on_request: Callable[[int, str], None] | None = None,
        settings: FakeSettings | None = None,
        scale_out: bool = True,
    ) -> None:
        for mode in (*plan, default):
            if mode not in MODES:
                raise ValueError(f"unknown mode {mode!r}; expected one of {MODES}")
        self._reply = reply
        self.plan = list(plan)
        self.default = default
        self.model = model
        """The only model name served; None accepts any (the benchmarks' judge and teacher)."""
        self.slow_s = slow_s
        self.on_request = on_request
        self.settings = settings or FakeSettings()
        self.scale_out = scale_out
        self.requests: list[str] = []
        """The fault mode used for each completions/generate request, in arrival order."""
        self.prompts: list[list[int]] = []
        self.base_url = ""
        self.port = 0
        self.stats = _Stats()
        self._builders: dict[bool, TeacherBodyBuilder] = {}
        self._cache: dict[tuple[str, tuple[int, ...], int], bytes] = {}
        self._judge_text = JUDGE_TEXT.format(hint=self.settings.hint)
        self._runner: web.AppRunner | None = None
        self._handlers: set[asyncio.Task] = set()

    # -- bodies ----------------------------------------------------------------------------------
    def builder(self, detokenize: bool) -> TeacherBodyBuilder:
        if detokenize not in self._builders:
            self._builders[detokenize] = TeacherBodyBuilder(self.settings, detokenize)
        return self._builders[detokenize]

    def reply_ids(self, prompt_ids: list[int], index: int) -> list[int]:
        if callable(self._reply):
            return list(self._reply(prompt_ids))
        replies = list(self._reply)
        return list(replies[min(index, len(replies) - 1)])

    def _generation_body(self, payload: dict, index: int) -> bytes:
        prompt = [int(t) for t in payload.get("prompt", [])]
        n = int(payload.get("n", 1))
        max_tokens = int(payload.get("max_tokens") or 16)
        choices = []
        for i in range(n):
            ids = self.reply_ids(prompt, index)
            finish = "stop"
            if len(ids) > max_tokens:
                ids, finish = ids[:max_tokens], "length"
            choices.append(
                {
                    "index": i,
                    "text": "",
                    "token_ids": ids,
                    "finish_reason": finish,
                    "logprobs": {"token_logprobs": [-0.5] * len(ids), "tokens": [], "top_logprobs": None},
                }
            )
        model = self.model or payload.get("model")
        body = {"id": f"cmpl-{index}", "object": "text_completion", "model": model, "choices": choices}
        return json.dumps(body).encode()

    def _teacher_body(self, route: str, prompt: list[int], k: int, model: str) -> bytes:
        key = (route, tuple(prompt), k)
        body = self._cache.get(key)
        if body is None:
            if route == "generate":
                body = self.builder(False).generate_body(prompt, k, model)
            else:
                body = self.builder(True).body(prompt, k, model)
            if len(self._cache) >= CACHE_ENTRIES:
                self._cache.pop(next(iter(self._cache)))
            self._cache[key] = body
        return body

    # -- routes ----------------------------------------------------------------------------------
    def _track(self) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._handlers.add(task)
            task.add_done_callback(self._handlers.discard)

    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self._token_route(request, "completions")

    async def generate(self, request: web.Request) -> web.StreamResponse:
        if not self.scale_out:  # what vLLM 0.32 answers when started without --enable-scale-out
            message = (
                "Scale-out endpoints are disabled. Restart vllm serve with --enable-scale-out to enable them."
            )
            return web.json_response(
                {"error": {"message": message, "type": "Forbidden", "code": 403}}, status=403
            )
        return await self._token_route(request, "generate")

    async def _token_route(self, request: web.Request, route: str) -> web.StreamResponse:
        self._track()
        started = time.perf_counter()
        index = len(self.requests)
        mode = self.plan[index] if index < len(self.plan) else self.default
        self.requests.append(mode)
        payload = json.loads(await request.read())
        params = payload.get("sampling_params") or {} if route == "generate" else payload
        prompt = payload.get("token_ids" if route == "generate" else "prompt")
        self.prompts.append(list(prompt or []))
        if self.on_request is not None:
            self.on_request(index, mode)
        if self.model is not None and payload.get("model") != self.model:
            return web.json_response(
                {"error": {"message": f"The model `{payload.get('model')}` does not exist."}}, status=404
            )
        k = int(params.get("prompt_logprobs") or 0)
        teacher = bool(k)
        stats = self.stats.teacher if teacher else self.stats.generation
        stats.enter()
        try:
            if mode == "500":
                return web.json_response({"error": {"message": "EngineCore died", "code": 500}}, status=500)
            if mode == "hang":
                await asyncio.sleep(3600)
            if mode == "slow":
                await asyncio.sleep(self.slow_s)
            if teacher:
                if not isinstance(prompt, list) or not prompt:
                    return web.json_response(
                        {"error": {"message": "fake teacher: need prompt ids"}}, status=400
                    )
                body = self._teacher_body(
                    route, [int(t) for t in prompt], k, str(payload.get("model", "fake"))
                )
                # The latency counts from the request's arrival: the answer comes after
                # max(latency, build time); a repeated prompt reuses its body.
                await asyncio.sleep(
                    max(0.0, self.settings.teacher_latency_s - (time.perf_counter() - started))
                )
            else:
                body = self._generation_body(payload, index)
            stats.bytes_out += len(body)
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
        finally:
            stats.leave()

    async def chat(self, request: web.Request) -> web.Response:
        self.stats.judge.enter()
        try:
            payload = json.loads(await request.read())
            await asyncio.sleep(self.settings.judge_latency_s)
            body = {
                "id": "chatcmpl-fake",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": payload.get("model", "fake-judge"),
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": self._judge_text},
                        "logprobs": None,
                        "finish_reason": "stop",
                    }
                ],
                "usage": {"prompt_tokens": 100, "total_tokens": 150, "completion_tokens": 50},
            }
            return web.json_response(body)
        finally:
            self.stats.judge.leave()

    async def get_stats(self, _request: web.Request) -> web.Response:
        return web.json_response(
            {name: asdict(getattr(self.stats, name)) for name in ("teacher", "judge", "generation")}
        )

    async def reset_stats(self, _request: web.Request) -> web.Response:
        self.stats = _Stats()
        return web.json_response({"ok": True})

    async def health(self, _request: web.Request) -> web.Response:
        return web.Response(text="")

    async def models(self, _request: web.Request) -> web.Response:
        return web.json_response(
            {"object": "list", "data": [{"id": self.model or "fake", "object": "model"}]}
        )

    # -- lifecycle -------------------------------------------------------------------------------
    def app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/completions", self.completions)
        app.router.add_post("/inference/v1/generate", self.generate)
        app.router.add_post("/v1/chat/completions", self.chat)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/health", self.health)
        app.router.add_get("/stats", self.get_stats)
        app.router.add_post("/stats/reset", self.reset_stats)
        return app

    async def start(self, port: int = 0, sock: socket.socket | None = None) -> FakeVLLM:
        self._runner = web.AppRunner(self.app(), handle_signals=False, access_log=None)
        await self._runner.setup()
        if sock is None:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(("127.0.0.1", port))
        site = web.SockSite(self._runner, sock, backlog=1024)
        await site.start()
        self.port = sock.getsockname()[1]
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

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


class FakeEndpoints:
    """Runs the fake judge + teacher in a child process; `with FakeEndpoints(...) as fake: fake.base_url`.

    The child is stopped by its own PID on exit."""

    def __init__(self, settings: FakeSettings | None = None, startup_timeout_s: float = 60.0) -> None:
        self.settings = settings or FakeSettings()
        self.startup_timeout_s = startup_timeout_s
        self.process: subprocess.Popen[str] | None = None
        self.port: int | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def root_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> FakeEndpoints:
        s = self.settings
        command = [
            sys.executable,
            "-m",
            "hermes_opd.devkit.fake_endpoints",
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            "--judge-latency",
            str(s.judge_latency_s),
            "--teacher-latency",
            str(s.teacher_latency_s),
            "--vocab-size",
            str(s.vocab_size),
            "--hint",
            s.hint,
        ]
        if s.tokenizer_dir:
            command += ["--tokenizer", str(s.tokenizer_dir)]
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
        deadline = time.monotonic() + self.startup_timeout_s
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line.startswith("PORT ") or time.monotonic() > deadline:
            self.__exit__(None, None, None)
            raise RuntimeError(f"fake endpoints did not start (got {line!r})")
        self.port = int(line.split()[1])
        return self

    def __exit__(self, *exc: object) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    def stats(self) -> dict[str, Any]:
        with urllib.request.urlopen(f"{self.root_url}/stats", timeout=10) as response:
            return json.loads(response.read())

    def reset_stats(self) -> None:
        request = urllib.request.Request(f"{self.root_url}/stats/reset", data=b"{}", method="POST")
        with urllib.request.urlopen(request, timeout=10) as response:
            response.read()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="the fake OpenAI/vLLM endpoint (judge, teacher, policy faults)"
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--judge-latency", type=float, default=0.3)
    parser.add_argument("--teacher-latency", type=float, default=0.15)
    parser.add_argument("--vocab-size", type=int, default=4096)
    parser.add_argument("--tokenizer", default=None)
    parser.add_argument("--hint", default=DEFAULT_HINT)
    parser.add_argument("--replies", default="[[0]]", help="JSON list of generated-id lists, one per request")
    parser.add_argument("--plan", default="", help="comma-separated fault modes, one per completions request")
    parser.add_argument("--default", default="ok", help="fault mode after the plan")
    parser.add_argument("--model", default=None, help="the one model name served (default: any)")
    parser.add_argument("--announce-requests", action="store_true", help="print `REQUEST n MODE` per request")
    parser.add_argument("--no-scale-out", action="store_true", help="no /inference/v1/generate route")
    args = parser.parse_args(argv)
    if args.host not in ("127.0.0.1", "localhost", "::1"):
        parser.error("the fake endpoints listen on 127.0.0.1 only")
    settings = FakeSettings(
        judge_latency_s=args.judge_latency,
        teacher_latency_s=args.teacher_latency,
        vocab_size=args.vocab_size,
        tokenizer_dir=args.tokenizer,
        hint=args.hint,
    )

    def announce(index: int, mode: str) -> None:
        print(f"REQUEST {index} {mode}", flush=True)

    fake = FakeVLLM(
        json.loads(args.replies),
        plan=[m for m in args.plan.split(",") if m],
        default=args.default,
        model=args.model,
        settings=settings,
        scale_out=not args.no_scale_out,
        on_request=announce if args.announce_requests else None,
    )

    async def serve() -> None:
        await fake.start(args.port)
        print(f"PORT {fake.port}", flush=True)
        parent = os.getppid()
        try:
            while os.getppid() == parent:  # never outlive the process that started us
                await asyncio.sleep(1.0)
        finally:
            await fake.stop()

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve())
    return 0


if __name__ == "__main__":
    sys.exit(main())
