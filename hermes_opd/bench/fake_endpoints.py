"""Local stand-ins for a remote judge and a remote teacher, with fixed latencies (benchmarks, tests).

One aiohttp app on 127.0.0.1, run in its OWN process (`FakeEndpoints`), so that building and
sending multi-megabyte teacher bodies never competes with the measured client for its event loop:
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
- `GET /stats`, `POST /stats/reset`: request counts and the maximum number of requests in flight at
  once, per route (tests use it to prove that a schedule really is sequential).

Run standalone: `python -m hermes_opd.bench.fake_endpoints --port 0` prints `PORT <n>` when ready.
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


def vllm_float(value: float) -> str:
    """How vLLM prints a float32 logprob: the repr of the float64 it becomes (e.g. -1.409581184387207)."""
    import numpy as np

    return repr(float(np.float32(value)))


class TeacherBodyBuilder:
    """Renders vLLM prompt-logprobs bodies for any prompt quickly, from pre-rendered fragments."""

    def __init__(self, settings: FakeSettings) -> None:
        vocab = settings.vocab_size
        self.vocab = vocab
        self.variants = settings.variants
        self.decoded = _decoded_tokens(vocab, settings.tokenizer_dir)
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
        if not 1 <= k <= MAX_K:
            raise ValueError(f"prompt_logprobs must be in [1, {MAX_K}]")
        entries = ["null"] + [self.entry(prompt_ids, pos, k) for pos in range(1, len(prompt_ids))]
        n = len(prompt_ids)
        return (
            '{"id":"cmpl-fake","object":"text_completion","created":' + str(int(time.time()))
            + ',"model":' + json.dumps(model)
            + ',"choices":[{"index":0,"text":" x","logprobs":null,"finish_reason":"length","stop_reason":null,'
            '"token_ids":null,"prompt_logprobs":[' + ",".join(entries)
            + '],"prompt_token_ids":null,"routed_experts":null}],"service_tier":null,'
            '"system_fingerprint":"fake-vllm","usage":{"prompt_tokens":' + str(n)
            + ',"total_tokens":' + str(n + 1)
            + ',"completion_tokens":1,"prompt_tokens_details":null,"completion_tokens_details":null},'
            '"kv_transfer_params":null,"ec_transfer_params":null,"metrics":null}'
        ).encode()  # fmt: skip


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


def make_app(settings: FakeSettings) -> web.Application:
    stats = _Stats()
    builder = TeacherBodyBuilder(settings)
    cache: dict[tuple[tuple[int, ...], int], bytes] = {}
    judge_text = JUDGE_TEXT.format(hint=settings.hint)

    async def completions(request: web.Request) -> web.Response:
        stats.teacher.enter()
        try:
            payload = json.loads(await request.read())
            prompt = payload.get("prompt")
            k = int(payload.get("prompt_logprobs") or 0)
            if not isinstance(prompt, list) or not prompt or not k:
                return web.json_response({"error": {"message": "fake teacher: need prompt ids and prompt_logprobs"}},
                                         status=400)  # fmt: skip
            # The body is built first and the latency is counted from the request's arrival, so the
            # answer comes after max(latency, build time); a repeated prompt reuses its body.
            started = time.perf_counter()
            key = (tuple(int(t) for t in prompt), k)
            body = cache.get(key)
            if body is None:
                body = builder.body(list(key[0]), k, str(payload.get("model", "fake")))
                if len(cache) >= CACHE_ENTRIES:
                    cache.pop(next(iter(cache)))
                cache[key] = body
            await asyncio.sleep(max(0.0, settings.teacher_latency_s - (time.perf_counter() - started)))
            stats.teacher.bytes_out += len(body)
            return web.Response(body=body, content_type="application/json")
        finally:
            stats.teacher.leave()

    async def chat(request: web.Request) -> web.Response:
        stats.judge.enter()
        try:
            payload = json.loads(await request.read())
            await asyncio.sleep(settings.judge_latency_s)
            body = {
                "id": "chatcmpl-fake",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": payload.get("model", "fake-judge"),
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": judge_text},
                        "logprobs": None,
                        "finish_reason": "stop",
                    }
                ],
                "usage": {"prompt_tokens": 100, "total_tokens": 150, "completion_tokens": 50},
            }
            return web.json_response(body)
        finally:
            stats.judge.leave()

    async def get_stats(_request: web.Request) -> web.Response:
        return web.json_response({"teacher": asdict(stats.teacher), "judge": asdict(stats.judge)})

    async def reset_stats(_request: web.Request) -> web.Response:
        stats.teacher = RouteStats()
        stats.judge = RouteStats()
        return web.json_response({"ok": True})

    async def models(_request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "fake", "object": "model"}]})

    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.router.add_post("/v1/completions", completions)
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/stats", get_stats)
    app.router.add_post("/stats/reset", reset_stats)
    return app


async def serve(settings: FakeSettings, host: str, port: int) -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    runner = web.AppRunner(make_app(settings), access_log=None)
    await runner.setup()
    site = web.SockSite(runner, sock, backlog=1024)
    await site.start()
    print(f"PORT {sock.getsockname()[1]}", flush=True)
    parent = os.getppid()
    try:
        while os.getppid() == parent:  # never outlive the benchmark that started us
            await asyncio.sleep(1.0)
    finally:
        await runner.cleanup()


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
            sys.executable, "-m", "hermes_opd.bench.fake_endpoints", "--host", "127.0.0.1", "--port", "0",
            "--judge-latency", str(s.judge_latency_s), "--teacher-latency", str(s.teacher_latency_s),
            "--vocab-size", str(s.vocab_size), "--hint", s.hint,
        ]  # fmt: skip
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
    parser = argparse.ArgumentParser(description="fake judge + remote-like teacher with fixed latencies")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--judge-latency", type=float, default=0.3)
    parser.add_argument("--teacher-latency", type=float, default=0.15)
    parser.add_argument("--vocab-size", type=int, default=4096)
    parser.add_argument("--tokenizer", default=None)
    parser.add_argument("--hint", default=DEFAULT_HINT)
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
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(settings, args.host, args.port))
    return 0


if __name__ == "__main__":
    sys.exit(main())
