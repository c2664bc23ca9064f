"""`hermes-opd bench teacher-scaling`: the cost of one teacher request against the context length L.

For each L, one teacher input of L real token ids (the dev tokenizer over source text) whose last
`turn_tokens` ids are the turn, scored on every available path, one request at a time, and a plain
prefill of the same ids on the same server in the same run (the floor no top-K path can beat):
- `prefill`: `/v1/completions`, `max_tokens: 1`, no prompt logprobs; sent FIRST for ids never sent
  before (the seeds carry a per-run salt), so it never reads a prefix cache other requests warmed;
- `completions`: `/v1/completions` with `prompt_logprobs: K` (today's path);
- `generate`: `/inference/v1/generate`, `detokenize: false` (needs `--enable-scale-out`; skipped,
  and reported as unavailable, when the server does not have the route);
- `transformers`: the in-process scorer (`scoring/transformers_scorer.py`) with the model at
  `--tokenizer` (the dev model directory holds the weights the server serves).

The paths' order rotates from one iteration to the next (the prefill always goes first). Per path
and L: wall time (request + the client's parse into the turn's contract rows), ms per context
position, response bytes, the client's parse time, and the ratio to the prefill. For the
in-process path the "response" is the turn's rows themselves (nothing else is built). Every path's
rows are checked against the `completions` rows (same top-K sets, values within 1e-4).

Headline keys: `best_over_prefill` (best path / prefill at the largest L), and, last,
`completions_over_best` (today's path / the best one at the largest L).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import time
from typing import Any

import aiohttp

from hermes_opd.bench.common import (
    add_server_arguments,
    machine_info,
    pick,
    server_arguments,
    with_headline,
    with_retries,
)
from hermes_opd.bench.teacher_bench import prompt_of_length, timed_post
from scoring.alignment import turn_rows
from scoring.request_paths import GENERATE_PATH, completions_payload, generate_payload
from scoring.response_parsing import parse_prompt_topk_json

PATHS = ("completions", "generate", "transformers")


def _progress(message: str) -> None:
    print(f"[bench teacher-scaling] {message}", file=sys.stderr, flush=True)


def rows_bytes(ids_rows: list[list[int]], lp_rows: list[list[float]]) -> int:
    """The turn's own rows as they travel in a ScoredDataGroup (JSON, default separators)."""
    return len(json.dumps(ids_rows)) + len(json.dumps(lp_rows))


def rows_max_diff(a: tuple[list, list], b: tuple[list, list], k: int) -> tuple[bool, float]:
    """(same top-k id sets at every position, largest |logprob difference| over shared ids)."""
    same = True
    worst = 0.0
    for ids_a, lps_a, ids_b, lps_b in zip(a[0], a[1], b[0], b[1], strict=True):
        same &= set(ids_a[:k]) == set(ids_b[:k])
        theirs = dict(zip(ids_b, lps_b, strict=True))
        for tok, lp in zip(ids_a, lps_a, strict=True):
            if tok in theirs:
                worst = max(worst, abs(theirs[tok] - lp))
    return same, worst


class _Server:
    def __init__(self, session: aiohttp.ClientSession, base_url: str, model: str, k: int) -> None:
        self.session = session
        self.base = base_url.rstrip("/")
        self.root = self.base[: -len("/v1")] if self.base.endswith("/v1") else self.base
        self.model = model
        self.k = k

    async def post(self, url: str, payload: dict[str, Any]) -> tuple[float, bytes]:
        text = json.dumps(payload)
        started = time.perf_counter()
        server_s, transfer_s, raw = await with_retries(lambda: timed_post(self.session, url, text))
        return time.perf_counter() - started, raw

    async def prefill(self, ids: list[int]) -> dict[str, Any]:
        payload = {"model": self.model, "prompt": ids, "max_tokens": 1, "temperature": 0.0}
        wall, raw = await self.post(f"{self.base}/completions", payload)
        return {"wall_s": wall, "bytes": len(raw)}

    async def path(
        self, name: str, ids: list[int], prompt_len: int
    ) -> tuple[dict[str, Any], tuple[list, list]]:
        if name == "generate":
            url, payload, route = (
                self.root + GENERATE_PATH,
                generate_payload(self.model, ids, self.k),
                "generate",
            )
        else:
            url, payload, route = (
                f"{self.base}/completions",
                completions_payload(self.model, ids, self.k),
                "completions",
            )
        request_s, raw = await self.post(url, payload)
        started = time.perf_counter()
        topk = parse_prompt_topk_json(raw, ids, self.k, from_pos=prompt_len, route=route)
        rows = turn_rows(topk, prompt_len, ids[prompt_len:], self.k)
        parse_s = time.perf_counter() - started
        return {
            "wall_s": request_s + parse_s,
            "request_s": request_s,
            "parse_s": parse_s,
            "bytes": len(raw),
        }, rows

    async def has_generate(self, ids: list[int]) -> bool:
        try:
            async with self.session.post(
                self.root + GENERATE_PATH, json=generate_payload(self.model, ids, 1)
            ) as r:
                await r.read()
                return r.status == 200
        except aiohttp.ClientError:
            return False


def _local(model_dir: str, k: int, threads: int | None):
    from scoring.transformers_scorer import TransformersTeacher

    teacher = TransformersTeacher(model_dir, k, max_batch=1, threads=threads)
    teacher.load()
    return teacher


def _score_local(teacher, ids: list[int], prompt_len: int) -> tuple[dict[str, Any], tuple[list, list]]:
    started = time.perf_counter()
    rows = teacher.score_batch([(ids, prompt_len)])[0]
    wall = time.perf_counter() - started
    return {"wall_s": wall, "request_s": wall, "parse_s": 0.0, "bytes": rows_bytes(*rows)}, rows


async def run(
    *,
    base_url: str,
    model: str,
    tokenizer_dir: str,
    lengths: list[int],
    turn_tokens: int,
    k: int,
    iters: int,
    paths: tuple[str, ...] = PATHS,
    local_threads: int | None = None,
) -> dict[str, Any]:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    local = _local(tokenizer_dir, k, local_threads) if "transformers" in paths else None
    # Fresh ids in every run (`--repeat`): vLLM's prefix cache must never serve a prefill from an
    # earlier run's requests, so the seeds carry a per-run salt.
    salt = random.SystemRandom().randrange(1, 1 << 30)
    cells: dict[str, dict[str, Any]] = {}
    connector = aiohttp.TCPConnector(keepalive_timeout=4)  # vLLM drops idle keep-alives after 5 s
    async with aiohttp.ClientSession(
        timeout=aiohttp.ClientTimeout(total=900), connector=connector
    ) as session:
        server = _Server(session, base_url, model, k)
        warm = prompt_of_length(tokenizer, max(lengths), seed=salt - 1)
        available = [p for p in paths if p != "generate" or await server.has_generate(warm[:16])]
        if "generate" in paths and "generate" not in available:
            _progress("the server has no /inference/v1/generate route (start vLLM with --enable-scale-out)")
        # Warm-up at the largest L: first-request costs (compilation, allocations) stay out.
        await server.prefill(warm)
        for name in available:
            if name == "transformers":
                _score_local(local, warm, max(lengths) - turn_tokens)
            else:
                await server.path(name, warm, max(lengths) - turn_tokens)
        for length in lengths:
            prompt_len = length - turn_tokens
            samples: dict[str, list[dict[str, Any]]] = {name: [] for name in ("prefill", *available)}
            agree: dict[str, tuple[bool, float]] = {}
            turn_rows_bytes = 0
            for i in range(iters):
                ids = prompt_of_length(tokenizer, length, seed=salt + length * 1000 + i)
                samples["prefill"].append(await server.prefill(ids))  # first: nothing cached for these ids
                rows_by_path = {}
                # The paths take turns going first: a request pays for the garbage the one before it
                # left in the server's frontend (vLLM allocates ~L x K objects per top-K response), so
                # a fixed order would charge that to whichever path always comes second.
                shift = i % len(available)
                for name in available[shift:] + available[:shift]:
                    if name == "transformers":
                        stats, rows = await asyncio.to_thread(_score_local, local, ids, prompt_len)
                    else:
                        stats, rows = await server.path(name, ids, prompt_len)
                    samples[name].append(stats)
                    rows_by_path[name] = rows
                reference = rows_by_path.get("completions")
                turn_rows_bytes = rows_bytes(*next(iter(rows_by_path.values())))
                for name, rows in rows_by_path.items():
                    if reference is not None:
                        same, diff = rows_max_diff(rows, reference, k)
                        old_same, old_diff = agree.get(name, (True, 0.0))
                        agree[name] = (same and old_same, max(diff, old_diff))
            prefill_s = statistics.median(s["wall_s"] for s in samples["prefill"])
            cell: dict[str, Any] = {
                "context": length,
                "turn_tokens": turn_tokens,
                "turn_rows_bytes": turn_rows_bytes,
                "prefill_s": prefill_s,
            }
            for name in available:
                med = {key: statistics.median(s[key] for s in samples[name]) for key in samples[name][0]}
                med["ms_per_position"] = med["wall_s"] / length * 1000
                med["over_prefill"] = med["wall_s"] / prefill_s
                med["bytes_over_turn_rows"] = med["bytes"] / turn_rows_bytes
                if name in agree:
                    med["same_topk_as_completions"] = agree[name][0]
                    med["max_abs_diff_vs_completions"] = agree[name][1]
                cell[name] = med
            cells[f"L{length}"] = cell
            _progress(
                f"L={length}: prefill {prefill_s:.3f}s; "
                + ", ".join(
                    f"{n} {cell[n]['wall_s']:.3f}s ({cell[n]['over_prefill']:.1f}x, {cell[n]['bytes'] / 1e6:.2f} MB)"
                    for n in available
                )
            )
    largest = cells[f"L{max(lengths)}"]
    best = min(available, key=lambda n: largest[n]["wall_s"])
    result: dict[str, Any] = {
        "bench": "teacher-scaling",
        "base_url": base_url,
        "k": k,
        "iters": iters,
        "local_threads": local_threads if local_threads is not None else "torch default",
        "paths": list(available),
        "generate_available": "generate" in available,
        "cells": cells,
        "largest_context": max(lengths),
        "best_path": best,
        "best_bytes_over_turn_rows": largest[best]["bytes_over_turn_rows"],
        "all_paths_agree": all(
            c[n].get("same_topk_as_completions", True)
            and c[n].get("max_abs_diff_vs_completions", 0.0) <= 1e-4
            for c in cells.values()
            for n in available
        ),
        "machine": machine_info(),
    }
    if "generate" in available and "completions" in available:
        result["completions_over_generate"] = largest["completions"]["wall_s"] / largest["generate"]["wall_s"]
    result["best_over_prefill"] = largest[best]["over_prefill"]
    baseline = largest["completions"]["wall_s"] if "completions" in available else float("nan")
    return with_headline(result, "completions_over_best", baseline / largest[best]["wall_s"])


# -- `hermes-opd bench teacher-scaling` (hermes_opd/bench/cli.py) -----------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--lengths", default=None, help="comma-separated context lengths (default 256,1024,2048,3584)"
    )
    parser.add_argument(
        "--turn-tokens", type=int, default=64, help="the turn's positions (the rows a teacher needs)"
    )
    parser.add_argument("--k", type=int, default=50)
    parser.add_argument("--iters", type=int, default=None, help="requests per path and length (default 3)")
    parser.add_argument("--paths", default="completions,generate,transformers", help="comma-separated paths")
    parser.add_argument(
        "--local-threads", type=int, default=None, help="torch threads of the in-process path"
    )
    add_server_arguments(parser)


def run_bench(args: argparse.Namespace) -> dict[str, Any]:
    q = args.quick
    lengths = [int(x) for x in (args.lengths or ("128,256" if q else "256,1024,2048,3584")).split(",")]
    return asyncio.run(
        run(
            **server_arguments(args),
            lengths=lengths,
            turn_tokens=min(args.turn_tokens, min(lengths) // 2),
            k=args.k,
            iters=pick(args.iters, 3, 1, q),
            paths=tuple(p for p in args.paths.split(",") if p),
            local_threads=args.local_threads,
        )
    )
