"""`hermes-opd bench proxy`: the proxy's cost per request, as a ratio to the same requests sent
straight to vLLM, at 1 and at 16 concurrent sessions, on each of its three wires, measured in one
run.

Real parts: the vLLM server at `--base-url`, which serves all three wires itself, the official SDK
clients for both paths (`openai`'s AsyncOpenAI for Chat Completions and Responses, `anthropic`'s
AsyncAnthropic for Messages), and `hermes-opd proxy` (environments/proxy/) as its own process, as
deployed, in three modes:
- `serve`: the proxy without training (rendering, exact ids, tool-call parsing): what a serve-only
  key or an opted-out request costs;
- `record`: the live training path without a teacher: sessions, each turn recorded with the
  sampler's logprobs (which vLLM computes for it), judged by the rules process judge (Binary RL)
  and written as groups. Every cost of learning from a request that falls on the request's path;
- `train`: OPD with the rules hint judge and the teacher on the SAME vLLM, so that the teacher's
  prompt-logprob requests compete with the live requests for the server's compute. That cost is
  the teacher's placement, not the proxy's (a teacher on its own server takes it away); it is
  reported beside the headline.

Each session is a conversation of `turns` requests (system + user, then each reply with a user
correction after it), every request with its own fixed seed, so direct vLLM and the proxy sample the
same continuations for a session's FIRST request (the mean completion tokens of each path are
reported to show it; vLLM's own Messages route takes no seed, so on that wire direct and proxied
continuations differ). Later requests differ by design on the training paths: a recording proxy puts
the tokens it sampled back into the history, where direct vLLM re-tokenizes the reply's text, so
their prompts, and then their continuations, differ (measured: 26.6 against 22.3 completion tokens
a request at one session). Rounds alternate direct, serve, record, train (the modes asked for), on
each wire, repeated `rounds` times after one unmeasured warm-up session per path and wire, so that
drift in the machine's load falls on every path alike; after each record or train round the bench
waits until that proxy has scored every turn, so that its judging and teacher requests never fall
into another path's round. Every request streams, as agents do.

The numbers are client-side wall times per request and times to the first streamed text (TTFT), p50
and p95, over every request and over the sessions' first requests (`first_turn`: the same requests
and the same sampled tokens on every path). The headline `worst_overhead_ratio` is the worst of the
first requests' p50 and p95 wall-time ratios of the serve and record modes over both concurrencies
and every wire (target <= 1.15), and `worst_ttft_ratio` the same for the time to first text (target
<= 1.15). Beside them, each proxy's own time per request from its `/metrics` (`<mode>_own_time`:
handler time minus the time waiting on vLLM's stream, p50 and p95 over all its requests, the
warm-up's included; environments/proxy/latency.py). With the record mode, `vllm_sampled_logprobs`:
each round also sends the proxy's own request for every session's first turn straight to vLLM,
without and with the sampled tokens' logprobs that a recorded turn needs, so that the part of the
record path's ratio that vLLM itself charges for them is measured beside it
(hermes_opd/bench/sampled_logprobs_cost.py).

On a machine with few cores, run vLLM and the bench on separate cores (docs/proxy.md, "Overhead":
`taskset`), as a GPU server and its proxy would be: otherwise the proxy's time per streamed token is
mostly the wait for a core that vLLM's threads hold.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import yaml
from transformers import AutoTokenizer

from hermes_opd.bench.common import add_server_arguments, machine_info, pick, server_arguments, with_headline
from hermes_opd.bench.sampled_logprobs_cost import first_prompts, measure_round
from hermes_opd.bench.sampled_logprobs_cost import summary as cost_summary
from hermes_opd.bench.stream_timings import timing_ratios, timing_stats
from hermes_opd.runtime.server_process import free_port
from hermes_opd.vllm_api.client import VLLMCompletionsClient

SYSTEM = "You are a coding agent."
USER = "Write function number {}."
"""Each session's first user message, formatted with the session's index."""
CORRECTION = (
    'It fails:\nTraceback (most recent call last):\n  File "main.py", line 3, in <module>\n    print(total(3))\n'
    "NameError: name 'total' is not defined\nName the function `total` and write it to helpers.py."
)
"""The user's reply after every turn: a failure the rules judge turns into a hint, so every turn of
the train mode also costs a teacher request on the same vLLM."""


MODES = ("serve", "record", "train")
MODE_PIPELINES: dict[str, dict[str, Any]] = {
    "serve": {},
    "record": {"enabled": False, "prm": {"enabled": True, "judge": {"backend": "rules"}}},
    "train": {"judge": {"backend": "rules"}, "teacher": {"path": "completions"}},
}
"""Each mode's `opd:` section (environments/pipeline/opd_config.py): record runs no teacher."""
HEADLINE_MODES = ("serve", "record")


WIRES = ("chat", "responses", "messages")
"""The wires measured: Chat Completions (the `openai` SDK's `chat.completions`), Responses (its
`responses`) and Anthropic Messages (the `anthropic` SDK). Direct vLLM serves each of them itself."""


async def _stream_chat(client, model, messages, max_tokens, seed, headers, started):
    """One streamed Chat Completions request: (text, seconds to the first text, completion tokens)."""
    stream = await client.chat.completions.create(
        model=model,
        messages=messages,
        max_tokens=max_tokens,
        temperature=1.0,
        stream=True,
        stream_options={"include_usage": True},
        seed=seed,
        extra_headers=headers,
    )
    first, content, completion_tokens = None, "", 0
    async for chunk in stream:
        if chunk.usage is not None:
            completion_tokens = chunk.usage.completion_tokens
        for choice in chunk.choices:
            if choice.delta.content:
                first = first if first is not None else time.perf_counter() - started
                content += choice.delta.content
    return content, first, completion_tokens


async def _stream_responses(client, model, messages, max_tokens, seed, headers, started):
    """One streamed Responses request (the system message as `instructions`)."""
    stream = await client.responses.create(
        model=model,
        instructions=messages[0]["content"],
        input=[{"role": m["role"], "content": m["content"]} for m in messages[1:]],
        max_output_tokens=max_tokens,
        temperature=1.0,
        stream=True,
        extra_body={"seed": seed},
        extra_headers=headers,
    )
    first, content, completion_tokens = None, "", 0
    async for event in stream:
        if event.type == "response.output_text.delta" and event.delta:
            first = first if first is not None else time.perf_counter() - started
            content += event.delta
        elif event.type in ("response.completed", "response.incomplete") and event.response.usage is not None:
            completion_tokens = event.response.usage.output_tokens
    return content, first, completion_tokens


async def _stream_messages(client, model, messages, max_tokens, seed, headers, started):
    """One streamed Anthropic Messages request (the system message as `system`)."""
    stream = await client.messages.create(
        model=model,
        system=messages[0]["content"],
        messages=messages[1:],
        max_tokens=max_tokens,
        stream=True,
        extra_body={"seed": seed, "temperature": 1.0},  # this SDK's create() takes no temperature
        extra_headers=headers,
    )
    first, content, completion_tokens = None, "", 0
    async for event in stream:
        if event.type == "content_block_delta" and getattr(event.delta, "text", None):
            first = first if first is not None else time.perf_counter() - started
            content += event.delta.text
        elif event.type == "message_delta" and event.usage is not None:
            completion_tokens = event.usage.output_tokens
    return content, first, completion_tokens


STREAMERS = {"chat": _stream_chat, "responses": _stream_responses, "messages": _stream_messages}


async def _session(
    client,
    wire: str,
    model: str,
    index: int,
    round_index: int,
    turns: int,
    max_tokens: int,
    headers: dict[str, str] | None,
) -> tuple[list[float], list[int], list[float], list[int]]:
    """One session's requests, streamed: (wall seconds, completion tokens, seconds to the first text,
    turn index)."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": USER.format(index)},
    ]
    times, tokens, firsts = [], [], []
    for turn in range(turns):
        started = time.perf_counter()
        seed = _seed(round_index, index, turn)
        content, first, completion_tokens = await STREAMERS[wire](
            client, model, messages, max_tokens, seed, headers, started
        )
        times.append(time.perf_counter() - started)
        firsts.append(first if first is not None else times[-1])
        tokens.append(completion_tokens)
        messages = messages + [
            {"role": "assistant", "content": content},
            {"role": "user", "content": CORRECTION},
        ]
    return times, tokens, firsts, list(range(turns))


def _seed(round_index: int, session: int, turn: int) -> int:
    """A request's seed: the same request gets the same seed on every path."""
    return 10_000 * round_index + 100 * session + turn


def _client(wire: str, url: str):
    """The official SDK client for `wire` at `url` (an OpenAI-style base URL ending in /v1)."""
    if wire == "messages":
        from anthropic import AsyncAnthropic

        return AsyncAnthropic(base_url=url.removesuffix("/v1"), api_key="x", max_retries=0, timeout=600)
    from openai import AsyncOpenAI

    return AsyncOpenAI(base_url=url, api_key="x", max_retries=0, timeout=600)


async def _round(
    url: str,
    wire: str,
    model: str,
    sessions: int,
    round_index: int,
    turns: int,
    max_tokens: int,
    with_header: bool,
) -> tuple[list[float], list[int], list[float], list[int]]:
    async with _client(wire, url) as client:
        results = await asyncio.gather(
            *(
                _session(
                    client,
                    wire,
                    model,
                    i,
                    round_index,
                    turns,
                    max_tokens,
                    {"X-Session-Id": f"{wire}-r{round_index}-s{i}"} if with_header else None,
                )
                for i in range(sessions)
            )
        )
    return tuple([x for result in results for x in result[k]] for k in range(4))  # type: ignore[return-value]


def _summary(times: list[float], tokens: list[int], firsts: list[float], turns: list[int]) -> dict[str, Any]:
    """p50/p95 of the wall and first-text times over every request, and the same over each
    session's first request alone (`first_turn`)."""

    def stats(picked: list[int]) -> dict[str, Any]:
        return timing_stats(
            [times[i] for i in picked], [tokens[i] for i in picked], [firsts[i] for i in picked]
        )

    summary: dict[str, Any] = stats(list(range(len(times))))
    summary["first_turn"] = stats([i for i, turn in enumerate(turns) if turn == 0])
    return summary


def _ratios(summary: dict[str, Any], direct: dict[str, Any]) -> None:
    """Each time's ratio to the same statistic of direct vLLM, written into `summary`."""
    summary.update(timing_ratios(summary, direct))


def _start_proxy(config: dict[str, Any], workdir: Path, name: str) -> tuple[subprocess.Popen, str]:
    """`hermes-opd proxy` as its own process, as deployed; returns it and its base URL."""
    path = workdir / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config))
    with (workdir / f"{name}.log").open("w") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "hermes_opd.commands.proxy", "--config", str(path)],
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
        )
    for line in process.stdout:
        if line.startswith("hermes-opd proxy: http://"):
            return process, line.split()[2]
    raise RuntimeError(f"the {name} proxy did not start (rc {process.wait()}); see {workdir / name}.log")


def _proxy_metrics(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url.removesuffix("/v1") + "/metrics.json", timeout=30) as response:
        return json.loads(response.read())


def _feed_stats(url: str) -> dict[str, Any]:
    return _proxy_metrics(url).get("feed", {})


def _stop(processes: list[subprocess.Popen]) -> None:
    for process in processes:
        process.send_signal(signal.SIGTERM)
    for process in processes:
        try:
            process.wait(timeout=300)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


async def _measure(
    base_url: str,
    model: str,
    urls: dict[str, str],
    wires: tuple[str, ...],
    concurrency: tuple[int, ...],
    turns: int,
    max_tokens: int,
    rounds: int,
    logprobs_reference: VLLMCompletionsClient | None,
    tokenizer: Any,
) -> tuple[
    dict[tuple[str, str, int], tuple[list[float], list[int], list[float], list[int]]],
    dict[int, dict[str, list[tuple[float, float, int]]]],
]:
    """Rounds of direct vLLM and then each proxy in `urls` (its mode -> base URL), in that order,
    on each wire: samples keyed by (wire, path, sessions); then, with `logprobs_reference`, vLLM's
    own price for the sampled logprobs on the sessions' first requests (sampled_logprobs_cost.py),
    keyed by sessions."""
    samples: dict[tuple[str, str, int], tuple[list[float], list[int], list[float], list[int]]] = {}
    reference: dict[int, dict[str, list[tuple[float, float, int]]]] = {}
    prompts = (
        {n: first_prompts(tokenizer, n, SYSTEM, USER) for n in concurrency} if logprobs_reference else {}
    )
    for wire in wires:  # warm-up, not measured: each path's first request pays its one-time costs
        for path, url in (("direct", base_url), *urls.items()):
            await _round(url, wire, model, 1, rounds, 1, 4, path != "direct")  # seeds no round uses
            if path in ("record", "train"):
                await _drained(url)
    for round_index in range(rounds):
        for sessions in concurrency:
            for wire in wires:
                for path, url in (("direct", base_url), *urls.items()):
                    measured = await _round(
                        url, wire, model, sessions, round_index, turns, max_tokens, path != "direct"
                    )
                    kept = samples.setdefault((wire, path, sessions), ([], [], [], []))
                    for into, values in zip(kept, measured, strict=True):
                        into.extend(values)
                    if path in ("record", "train"):  # its judging and teacher requests stay in its round
                        await _drained(url)
            if logprobs_reference is not None:
                seeds = [_seed(round_index, i, 0) for i in range(sessions)]
                measured_pair = await measure_round(
                    logprobs_reference, prompts[sessions], seeds, max_tokens, reverse=round_index % 2 == 1
                )
                kept_pair = reference.setdefault(sessions, {variant: [] for variant in measured_pair})
                for variant, rows in measured_pair.items():
                    kept_pair[variant].extend(rows)
    return samples, reference


async def _drained(url: str, timeout_s: float = 900.0) -> None:
    """Wait until a training proxy's feed has scored every turn it was given."""
    deadline = time.monotonic() + timeout_s
    while (await asyncio.to_thread(_feed_stats, url)).get("pending", 0) and time.monotonic() < deadline:
        await asyncio.sleep(0.5)


async def run(
    base_url: str,
    model: str,
    tokenizer_dir: str,
    concurrency: tuple[int, ...] = (1, 16),
    turns: int = 3,
    max_tokens: int = 32,
    rounds: int = 3,
    modes: tuple[str, ...] = ("serve", "train"),
    wires: tuple[str, ...] = WIRES,
) -> dict[str, Any]:
    workdir = Path(tempfile.mkdtemp(prefix="proxy-bench-"))
    urls: dict[str, str] = {}
    processes: list[subprocess.Popen] = []
    try:
        for mode in modes:
            config = {
                "policy_base_url": base_url,
                "policy_model": model,
                "tokenizer": tokenizer_dir,
                "port": free_port(),
                "train": mode != "serve",
                "groups_path": str(workdir / f"{mode}-groups.jsonl"),
                "opd": MODE_PIPELINES[mode],
            }
            process, urls[mode] = _start_proxy(config, workdir, mode)
            processes.append(process)
        reference_client = (
            VLLMCompletionsClient(base_url, model, timeout_s=600) if "record" in modes else None
        )
        try:
            samples, reference = await _measure(
                base_url,
                model,
                urls,
                wires,
                concurrency,
                turns,
                max_tokens,
                rounds,
                reference_client,
                AutoTokenizer.from_pretrained(tokenizer_dir) if reference_client else None,
            )
        finally:
            if reference_client is not None:
                await reference_client.close()
        metrics = {mode: _proxy_metrics(url) for mode, url in urls.items()}
    finally:
        _stop(processes)
    result: dict[str, Any] = {
        "machine": machine_info(),
        "turns": turns,
        "max_tokens": max_tokens,
        "rounds": rounds,
    }
    worst = worst_ttft = 0.0
    for wire in wires:
        per_wire: dict[str, Any] = {}
        for sessions in concurrency:
            direct = _summary(*samples[(wire, "direct", sessions)])
            entry: dict[str, Any] = {"direct": direct}
            for mode in modes:
                summary = _summary(*samples[(wire, mode, sessions)])
                _ratios(summary, direct)
                _ratios(summary["first_turn"], direct["first_turn"])
                entry[mode] = summary
                if mode in HEADLINE_MODES:
                    first = summary["first_turn"]
                    worst = max(worst, first["p50_ratio"], first["p95_ratio"])
                    worst_ttft = max(worst_ttft, first["ttft_p50_ratio"], first["ttft_p95_ratio"])
            per_wire[f"sessions_{sessions}"] = entry
        result[wire] = per_wire
    if reference:  # how much of the record path's ratio is vLLM computing the logprobs it needs
        result["vllm_sampled_logprobs"] = {
            f"sessions_{n}": cost_summary(rows) for n, rows in reference.items()
        }
    result["worst_ttft_ratio"] = worst_ttft  # time to first text: the same modes, concurrencies, wires
    keys = ("submitted", "scored_turns", "samples_grouped", "dropped_queue_full", "pending")
    for mode, body in metrics.items():
        result[f"{mode}_own_time"] = body["latency"]  # handler minus vLLM call, all its requests
        if "feed" in body:
            result[f"{mode}_feed_at_end"] = {k: body["feed"].get(k, 0) for k in keys}
    return with_headline(result, "worst_overhead_ratio", worst)


# -- `hermes-opd bench proxy` (hermes_opd/bench/cli.py) ---------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--turns", type=int, default=None, help="requests per session (default 3; quick 2)")
    parser.add_argument("--max-tokens", type=int, default=None, help="per request (default 32; quick 8)")
    parser.add_argument("--rounds", type=int, default=None, help="alternating rounds (default 3; quick 1)")
    parser.add_argument("--sessions", default="1,16", help="concurrencies, comma-separated (default 1,16)")
    parser.add_argument(
        "--wires",
        default=",".join(WIRES),
        help="wires to measure, from chat, responses and messages (default all three)",
    )
    parser.add_argument(
        "--modes",
        default="serve,record,train",
        help="proxies to measure, from serve, record (the headline's two) and train (default all)",
    )
    add_server_arguments(parser)


def run_bench(args: argparse.Namespace) -> dict[str, Any]:
    q = args.quick
    return asyncio.run(
        run(
            **server_arguments(args),
            concurrency=tuple(int(s) for s in args.sessions.split(",") if s),
            turns=pick(args.turns, 3, 2, q),
            max_tokens=pick(args.max_tokens, 32, 8, q),
            rounds=pick(args.rounds, 3, 1, q),
            modes=_modes(args.modes),
            wires=_wires(args.wires),
        )
    )


def _subset(text: str, known: tuple[str, ...]) -> tuple[str, ...]:
    """The comma-separated names in `text`, in `known`'s order; () when any is unknown or none given."""
    chosen = {name.strip() for name in text.split(",") if name.strip()}
    return tuple(name for name in known if name in chosen) if chosen and chosen <= set(known) else ()


def _modes(text: str) -> tuple[str, ...]:
    modes = _subset(text, MODES)
    if not set(modes) & set(HEADLINE_MODES):
        raise SystemExit(
            f"--modes takes serve, record and train, with serve or record among them, got {text!r}"
        )
    return modes


def _wires(text: str) -> tuple[str, ...]:
    wires = _subset(text, WIRES)
    if not wires:
        raise SystemExit(f"--wires takes chat, responses and messages, got {text!r}")
    return wires
