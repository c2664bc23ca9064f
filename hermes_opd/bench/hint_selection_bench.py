"""`hermes-opd bench hint-selection`: the cost of scoring m candidate hints against one hint.

A teacher policy of `hint_choice` (judge/hint_choice.py) scores every candidate hint of a turn. The
candidates share the whole context up to the hint. One turn, per iteration, with fresh ids (a
per-iteration salt, so no request reads a prefix cache an earlier iteration warmed):
context (L real ids from the dev tokenizer) | hint (its own ids, one per candidate) | the last
`--tail-tokens` of the context again (what sits between a hint and the turn) | the turn.

Paths, each timed for ONE hint and for m hints, in the same run:
- `transformers`: the in-process scorer. One hint: `score_batch`. m hints:
  `score_shared_prefix` (the shared prefix once, its KV cache reused for each candidate's hint and
  turn). Also `score_batch` over the m inputs without reuse, for reference. The reuse path's rows
  are checked against the separate ones (same top-K sets, values within 1e-4).
- `completions` / `generate` (vLLM): one request, then m requests sent together. Prompt-logprob
  requests never read vLLM's prefix cache (by default, and reading it returns garbage rows for the
  cached positions), so the m requests each pay their whole prompt. What prefix caching WOULD save
  is measured beside it: a plain prefill of a second candidate right after the first (cache warm)
  against a plain prefill of a fresh input.

Headline, last key: `candidates_over_single`, the best path's (m hints) / (one hint) wall-time
ratio (smaller is better; m = 3 scored separately would be about 3).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import time
from typing import Any

import aiohttp

from hermes_opd.bench.common import add_server_arguments, machine_info, pick, server_arguments, with_headline
from hermes_opd.bench.teacher_bench import prompt_of_length
from hermes_opd.bench.teacher_scaling import _Server, rows_max_diff

HINT_TEXTS = (
    "Write solution.py first, then run the tests.",
    "Read the failing assertion and fix that case only; the others already pass.",
    "Run python -m pytest -q before you answer.",
    "Check the edge case of an empty list.",
)


def _progress(message: str) -> None:
    print(f"[bench hint-selection] {message}", file=sys.stderr, flush=True)


def candidate_inputs(
    tokenizer: Any, context_tokens: int, turn_tokens: int, tail_tokens: int, m: int, seed: int
) -> list[tuple[list[int], int]]:
    """m teacher inputs `(ids, prompt_len)` that differ only in the hint (see the module docstring)."""
    if m > len(HINT_TEXTS):
        raise ValueError(f"m = {m}: the bench has {len(HINT_TEXTS)} hint texts")
    ids = prompt_of_length(tokenizer, context_tokens + turn_tokens, seed)
    context, turn = ids[:context_tokens], ids[context_tokens:]
    tail = context[-tail_tokens:] if tail_tokens else []
    inputs = []
    for text in HINT_TEXTS[:m]:
        hint = tokenizer.encode(text, add_special_tokens=False)
        prompt = context + hint + tail
        inputs.append((prompt + turn, len(prompt)))
    return inputs


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def _timed(fn):
    started = time.perf_counter()
    value = fn()
    return time.perf_counter() - started, value


def _local_cells(teacher: Any, inputs: list[tuple[list[int], int]], samples: dict[str, list[float]]) -> float:
    single_s, _ = _timed(lambda: teacher.score_batch(inputs[:1]))
    reuse_s, reused = _timed(lambda: teacher.score_shared_prefix(inputs))
    separate_s, separate = _timed(lambda: teacher.score_batch(inputs))
    samples["single_s"].append(single_s)
    samples["candidates_s"].append(reuse_s)
    samples["candidates_no_reuse_s"].append(separate_s)
    worst = 0.0
    for a, b in zip(reused, separate, strict=True):
        same, diff = rows_max_diff(a, b, teacher.k)
        if not same:
            raise RuntimeError("shared-prefix rows have other top-K sets than separately scored ones")
        worst = max(worst, diff)
    return worst


async def _server_cells(
    server: _Server, name: str, inputs: list[tuple[list[int], int]], samples: dict[str, list[float]]
) -> None:
    started = time.perf_counter()
    await server.path(name, *inputs[0])
    samples["single_s"].append(time.perf_counter() - started)
    started = time.perf_counter()
    await asyncio.gather(*(server.path(name, ids, p) for ids, p in inputs))
    samples["candidates_s"].append(time.perf_counter() - started)


async def _prefix_cache_cells(server: _Server, inputs: list[tuple[list[int], int]], samples) -> None:
    """A plain prefill of a fresh candidate, then of another one sharing its prefix (cache warm)."""
    samples["prefill_fresh_s"].append((await server.prefill(inputs[0][0]))["wall_s"])
    samples["prefill_shared_prefix_s"].append((await server.prefill(inputs[1][0]))["wall_s"])


async def run(
    *,
    base_url: str,
    model: str,
    tokenizer_dir: str,
    context_tokens: int,
    turn_tokens: int,
    tail_tokens: int,
    m: int,
    k: int,
    iters: int,
    paths: tuple[str, ...],
    local_threads: int | None = None,
) -> dict[str, Any]:
    from transformers import AutoTokenizer

    if m < 2:
        raise ValueError(f"m must be >= 2 candidates, got {m}")
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    salt = random.SystemRandom().randrange(1, 1 << 30)
    result: dict[str, Any] = {
        "machine": machine_info(),
        "context_tokens": context_tokens,
        "turn_tokens": turn_tokens,
        "tail_tokens": tail_tokens,
        "m": m,
        "k": k,
        "iters": iters,
    }
    paths_out: dict[str, dict[str, Any]] = {}
    if "transformers" in paths:
        from scoring.transformers_scorer import TransformersTeacher

        teacher = TransformersTeacher(tokenizer_dir, k, max_batch=m, threads=local_threads)
        teacher.load()
        _local_cells(
            teacher,
            candidate_inputs(tokenizer, context_tokens, turn_tokens, tail_tokens, m, salt),
            {"single_s": [], "candidates_s": [], "candidates_no_reuse_s": []},
        )
        samples: dict[str, list[float]] = {"single_s": [], "candidates_s": [], "candidates_no_reuse_s": []}
        worst = 0.0
        for i in range(iters):
            inputs = candidate_inputs(tokenizer, context_tokens, turn_tokens, tail_tokens, m, salt + 1 + i)
            worst = max(worst, _local_cells(teacher, inputs, samples))
        cell = {key: _median(values) for key, values in samples.items()}
        cell["max_abs_diff_vs_separate"] = worst
        cell["candidates_over_single"] = cell["candidates_s"] / cell["single_s"]
        cell["no_reuse_over_single"] = cell["candidates_no_reuse_s"] / cell["single_s"]
        paths_out["transformers"] = cell
        _progress(
            f"transformers: {cell['candidates_over_single']:.2f}x with reuse, "
            f"{cell['no_reuse_over_single']:.2f}x without"
        )
    remote = [p for p in paths if p in ("completions", "generate")]
    if remote:
        connector = aiohttp.TCPConnector(keepalive_timeout=4)
        async with aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=900), connector=connector
        ) as session:
            server = _Server(session, base_url, model, k)
            warm = candidate_inputs(tokenizer, context_tokens, turn_tokens, tail_tokens, m, salt - 1)
            if "generate" in remote and not await server.has_generate(warm[0][0][:16]):
                _progress(
                    "the server has no /inference/v1/generate route (start vLLM with --enable-scale-out)"
                )
                remote = [p for p in remote if p != "generate"]
            for name in remote:
                await server.path(name, *warm[0])  # first-request costs stay out
            cache: dict[str, list[float]] = {"prefill_fresh_s": [], "prefill_shared_prefix_s": []}
            for name in remote:
                samples = {"single_s": [], "candidates_s": []}
                for i in range(iters):
                    seed = salt + 1000 * (1 + remote.index(name)) + i
                    inputs = candidate_inputs(tokenizer, context_tokens, turn_tokens, tail_tokens, m, seed)
                    await _server_cells(server, name, inputs, samples)
                cell = {key: _median(values) for key, values in samples.items()}
                cell["candidates_over_single"] = cell["candidates_s"] / cell["single_s"]
                paths_out[name] = cell
                _progress(f"{name}: {cell['candidates_over_single']:.2f}x")
            for i in range(iters):
                seed = salt + 900_000 + i
                await _prefix_cache_cells(
                    server,
                    candidate_inputs(tokenizer, context_tokens, turn_tokens, tail_tokens, m, seed),
                    cache,
                )
            fresh, shared = _median(cache["prefill_fresh_s"]), _median(cache["prefill_shared_prefix_s"])
            result["vllm_plain_prefill"] = {
                "fresh_s": fresh,
                "shared_prefix_s": shared,
                "shared_over_fresh": shared / fresh,
                "note": "what prefix caching saves a plain prefill; prompt-logprob requests do not read it",
            }
    if not paths_out:
        raise ValueError(f"no path to measure among {paths}")
    result["paths"] = paths_out
    best = min(paths_out, key=lambda name: paths_out[name]["candidates_over_single"])
    result["best_path"] = best
    return with_headline(result, "candidates_over_single", paths_out[best]["candidates_over_single"])


# -- `hermes-opd bench hint-selection` (hermes_opd/bench/cli.py) ------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--context-tokens", type=int, default=None, help="context before the hint (default 2048; quick 256)"
    )
    parser.add_argument(
        "--turn-tokens", type=int, default=None, help="the turn's positions (default 64; quick 16)"
    )
    parser.add_argument("--tail-tokens", type=int, default=32, help="ids between the hint and the turn")
    parser.add_argument("--m", type=int, default=3, help="candidate hints")
    parser.add_argument("--k", type=int, default=50)
    parser.add_argument("--iters", type=int, default=None, help="turns per path (default 5; quick 1)")
    parser.add_argument("--paths", default="transformers,completions,generate", help="comma-separated paths")
    parser.add_argument(
        "--local-threads", type=int, default=None, help="torch threads of the in-process path"
    )
    add_server_arguments(parser)


def run_bench(args: argparse.Namespace) -> dict[str, Any]:
    q = args.quick
    return asyncio.run(
        run(
            **server_arguments(args),
            context_tokens=pick(args.context_tokens, 2048, 256, q),
            turn_tokens=pick(args.turn_tokens, 64, 16, q),
            tail_tokens=args.tail_tokens,
            m=args.m,
            k=args.k,
            iters=pick(args.iters, 5, 1, q),
            paths=tuple(p for p in args.paths.split(",") if p),
            local_threads=args.local_threads,
        )
    )
