"""`hermes-opd bench proxy`: the proxy's cost per request, as a ratio to the same requests sent
straight to vLLM, at 1 and at 16 concurrent sessions, measured in one run.

Real parts: the vLLM server at `--base-url`, the official `openai` client (AsyncOpenAI) for both
paths, and `hermes-opd proxy` in this process (environments/proxy/), in two modes:
- `serve`: the proxy without training (rendering, exact ids, tool-call parsing, sessions);
- `train`: the proxy as deployed, with the rules judge and the teacher on the same vLLM, so the
  teacher's prompt-logprob requests compete with the live requests, as they would.

Each session is a conversation of `turns` requests (system + user, then each reply with a user
correction after it), every request with its own fixed seed, so direct vLLM and the proxy sample
the same continuations (the mean completion tokens of each path are reported to show it). Rounds
alternate direct, serve, train, repeated `rounds` times, so that drift in the machine's load falls
on every path alike. The numbers are client-side wall times per request, p50 and p95; the headline
is the worst of the train mode's p50 and p95 ratios over both concurrencies (target <= 1.15).
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from hermes_opd.bench.common import machine_info, with_headline

SYSTEM = "You are a coding agent."
CORRECTION = (
    'It fails:\nTraceback (most recent call last):\n  File "main.py", line 3, in <module>\n    print(total(3))\n'
    "NameError: name 'total' is not defined\nName the function `total` and write it to helpers.py."
)
"""The user's reply after every turn: a failure the rules judge turns into a hint, so every turn of
the train mode also costs a teacher request on the same vLLM."""


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def _session(client, model: str, index: int, round_index: int, turns: int, max_tokens: int,
                   headers: dict[str, str] | None) -> tuple[list[float], list[int]]:  # fmt: skip
    messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM},
                                      {"role": "user", "content": f"Write function number {index}."}]  # fmt: skip
    times, tokens = [], []
    for turn in range(turns):
        started = time.perf_counter()
        answer = await client.chat.completions.create(
            model=model, messages=messages, max_tokens=max_tokens, temperature=1.0,
            seed=10_000 * round_index + 100 * index + turn, extra_headers=headers)  # fmt: skip
        times.append(time.perf_counter() - started)
        tokens.append(answer.usage.completion_tokens)
        messages = messages + [answer.choices[0].message.model_dump(exclude_none=True),
                               {"role": "user", "content": CORRECTION}]  # fmt: skip
    return times, tokens


async def _round(url: str, model: str, sessions: int, round_index: int, turns: int, max_tokens: int,
                 with_header: bool) -> tuple[list[float], list[int]]:  # fmt: skip
    from openai import AsyncOpenAI

    async with AsyncOpenAI(base_url=url, api_key="x", max_retries=0, timeout=600) as client:
        results = await asyncio.gather(*(
            _session(client, model, i, round_index, turns, max_tokens,
                     {"X-Session-Id": f"r{round_index}-s{i}"} if with_header else None)
            for i in range(sessions)))  # fmt: skip
    return [t for ts, _ in results for t in ts], [n for _, ns in results for n in ns]


def _summary(times: list[float], tokens: list[int]) -> dict[str, float]:
    return {"p50_s": percentile(times, 0.5), "p95_s": percentile(times, 0.95), "requests": len(times),
            "completion_tokens_mean": statistics.fmean(tokens)}  # fmt: skip


async def run(base_url: str, model: str, tokenizer_dir: str, concurrency: tuple[int, ...] = (1, 16),
              turns: int = 3, max_tokens: int = 32, rounds: int = 3) -> dict[str, Any]:  # fmt: skip
    from environments.proxy.build import build_proxy, load_tokenizer
    from environments.proxy.proxy_config import ProxyConfig
    from environments.proxy.server import run_app

    tokenizer = load_tokenizer(tokenizer_dir)
    workdir = Path(tempfile.mkdtemp(prefix="proxy-bench-"))
    proxies: dict[str, tuple[Any, Any, str]] = {}
    for mode in ("serve", "train"):
        config = ProxyConfig(policy_base_url=base_url, policy_model=model, tokenizer=tokenizer_dir, port=0,
                             train=mode == "train", groups_path=str(workdir / "groups.jsonl"),
                             opd={"judge": {"backend": "rules"}, "teacher": {"path": "completions"}})  # fmt: skip
        server = await build_proxy(config, tokenizer)
        runner = await run_app(server, "127.0.0.1", 0)
        proxies[mode] = (server, runner, f"http://127.0.0.1:{runner.addresses[0][1]}/v1")
    samples: dict[tuple[str, int], tuple[list[float], list[int]]] = {}
    try:
        await _round(base_url, model, 1, -1, 1, 4, False)  # warm-up
        for round_index in range(rounds):
            for sessions in concurrency:
                for path, url in (
                    ("direct", base_url),
                    ("serve", proxies["serve"][2]),
                    ("train", proxies["train"][2]),
                ):
                    times, tokens = await _round(
                        url, model, sessions, round_index, turns, max_tokens, path != "direct"
                    )
                    kept = samples.setdefault((path, sessions), ([], []))
                    kept[0].extend(times)
                    kept[1].extend(tokens)
        train_stats = proxies["train"][0].feed.stats
    finally:
        for server, runner, _ in proxies.values():
            await server.stop_background(drain_s=300)
            await runner.cleanup()
    result: dict[str, Any] = {
        "machine": machine_info(),
        "turns": turns,
        "max_tokens": max_tokens,
        "rounds": rounds,
    }
    worst = 0.0
    for sessions in concurrency:
        direct = _summary(*samples[("direct", sessions)])
        entry: dict[str, Any] = {"direct": direct}
        for mode in ("serve", "train"):
            summary = _summary(*samples[(mode, sessions)])
            summary["p50_ratio"] = summary["p50_s"] / direct["p50_s"]
            summary["p95_ratio"] = summary["p95_s"] / direct["p95_s"]
            entry[mode] = summary
        worst = max(worst, entry["train"]["p50_ratio"], entry["train"]["p95_ratio"])
        result[f"sessions_{sessions}"] = entry
    result["train_samples"] = {"groups": train_stats.groups_written, "samples": train_stats.samples_grouped,
                               "scored_turns": train_stats.scored_turns, "dropped": train_stats.dropped_queue_full}  # fmt: skip
    return with_headline(result, "worst_train_overhead_ratio", worst)
