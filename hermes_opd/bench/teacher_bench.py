"""`hermes-opd bench teacher`: one teacher request against the dev vLLM server, split into its parts.

For each context length L and top-K: a prompt of L real token ids (the dev tokenizer over source
text), sent as `/v1/completions` with `prompt_logprobs: K, max_tokens: 1`, `iters` times. Per request:
- server: time to the response headers (vLLM builds the whole JSON body before it sends them, so
  this is queueing + forward pass + building and serializing every position's logprob dict);
- transfer: headers to the last body byte;
- parsing, three ways on the same body: `plain` = `json.loads` of the text, then
  `parse_prompt_topk` (the dict parser, every row: the specification of the fast one);
  `fast_full` = `parse_prompt_topk_json` (msgspec, every row); `fast_turn` = the same with
  `from_pos` = L - turn_tokens, i.e. only the rows a teacher needs (the turn's).
Every cell also checks that the three parses give the same rows (where they overlap).
"""

from __future__ import annotations

import argparse
import asyncio
import json
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
from hermes_opd.bench.synth import filler
from scoring.response_parsing import parse_prompt_topk, parse_prompt_topk_json


def prompt_of_length(tokenizer: Any, n: int, seed: int) -> list[int]:
    import random

    text = filler(tokenizer, n + 16, random.Random(seed))
    ids = tokenizer.encode(text, add_special_tokens=False)[:n]
    while len(ids) < n:
        ids += ids[: n - len(ids)]
    return ids


def _timed(fn) -> tuple[float, Any]:
    started = time.perf_counter()
    value = fn()
    return time.perf_counter() - started, value


async def timed_post(session: aiohttp.ClientSession, url: str, payload: str) -> tuple[float, float, bytes]:
    """(seconds to the response headers, seconds from there to the last body byte, body)."""
    started = time.perf_counter()
    async with session.post(url, data=payload, headers={"Content-Type": "application/json"}) as response:
        headers_at = time.perf_counter()
        raw = await response.read()
        ended = time.perf_counter()
        if response.status != 200:
            raise RuntimeError(f"teacher answered {response.status}: {raw[:300]!r}")
    return headers_at - started, ended - headers_at, raw


async def one_request(
    session: aiohttp.ClientSession, url: str, model: str, ids: list[int], k: int, turn_tokens: int
) -> dict[str, Any]:
    payload = json.dumps(
        {"model": model, "prompt": ids, "max_tokens": 1, "temperature": 0.0, "prompt_logprobs": k}
    )
    server_s, transfer_s, raw = await with_retries(lambda: timed_post(session, url, payload))
    plain_s, plain = _timed(lambda: parse_prompt_topk(json.loads(raw.decode("utf-8")), ids, k))
    full_s, full = _timed(lambda: parse_prompt_topk_json(raw, ids, k))
    from_pos = len(ids) - turn_tokens
    turn_s, turn = _timed(lambda: parse_prompt_topk_json(raw, ids, k, from_pos=from_pos))
    identical = (
        plain.token_ids == full.token_ids
        and plain.logprobs == full.logprobs
        and turn.token_ids[from_pos:] == full.token_ids[from_pos:]
        and turn.logprobs[from_pos:] == full.logprobs[from_pos:]
    )
    return {
        "server_s": server_s,
        "transfer_s": transfer_s,
        "bytes": len(raw),
        "parse_plain_s": plain_s,
        "parse_fast_full_s": full_s,
        "parse_fast_turn_s": turn_s,
        "identical": identical,
    }


async def run(
    *,
    base_url: str,
    model: str,
    tokenizer_dir: str,
    lengths: list[int],
    ks: list[int],
    turn_tokens: int,
    iters: int,
) -> dict[str, Any]:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    url = base_url.rstrip("/") + "/completions"
    cells: dict[str, dict[str, Any]] = {}
    # vLLM drops idle keep-alive connections after 5 s: never reuse one older than 4 s.
    connector = aiohttp.TCPConnector(keepalive_timeout=4)
    async with aiohttp.ClientSession(
        timeout=aiohttp.ClientTimeout(total=600), connector=connector
    ) as session:
        warm = prompt_of_length(tokenizer, min(lengths), seed=99)
        await one_request(session, url, model, warm, min(ks), min(turn_tokens, len(warm) - 1))
        for length in lengths:
            for k in ks:
                samples = []
                for i in range(iters):
                    ids = prompt_of_length(tokenizer, length, seed=length * 100 + i)
                    samples.append(await one_request(session, url, model, ids, k, turn_tokens))
                cell: dict[str, Any] = {"context": length, "k": k}
                for key in samples[0]:
                    if key == "identical":
                        cell[key] = all(s[key] for s in samples)
                    else:
                        cell[key] = statistics.median(s[key] for s in samples)
                cell["total_plain_s"] = cell["server_s"] + cell["transfer_s"] + cell["parse_plain_s"]
                cell["parse_share_plain"] = cell["parse_plain_s"] / cell["total_plain_s"]
                cell["total_fast_s"] = cell["server_s"] + cell["transfer_s"] + cell["parse_fast_turn_s"]
                cell["parse_share_fast"] = cell["parse_fast_turn_s"] / cell["total_fast_s"]
                cells[f"L{length}_K{k}"] = cell
                print(
                    f"[bench teacher] L={length} K={k}: server {cell['server_s']:.3f}s, transfer "
                    f"{cell['transfer_s']:.4f}s, {cell['bytes'] / 1e6:.2f} MB, parse {cell['parse_plain_s']:.3f}s"
                    f" -> {cell['parse_fast_full_s']:.3f}s (all rows) / {cell['parse_fast_turn_s']:.4f}s "
                    f"(turn rows)",
                    flush=True,
                    file=sys.stderr,
                )
    plain = sum(c["parse_plain_s"] for c in cells.values())
    fast_full = sum(c["parse_fast_full_s"] for c in cells.values())
    fast_turn = sum(c["parse_fast_turn_s"] for c in cells.values())
    result: dict[str, Any] = {
        "bench": "teacher",
        "base_url": base_url,
        "turn_tokens": turn_tokens,
        "iters": iters,
        "cells": cells,
        "all_identical": all(c["identical"] for c in cells.values()),
        "parse_share_plain_max": max(c["parse_share_plain"] for c in cells.values()),
        "parse_share_fast_max": max(c["parse_share_fast"] for c in cells.values()),
        "parse_plain_s_sum": plain,
        "parse_fast_full_s_sum": fast_full,
        "parse_fast_turn_s_sum": fast_turn,
        "parse_speedup_full": plain / fast_full,
        "machine": machine_info(),
    }
    return with_headline(result, "parse_speedup_turn", plain / fast_turn)


# -- `hermes-opd bench teacher` (hermes_opd/bench/cli.py) -------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--lengths", default=None, help="comma-separated context lengths (default 256,1024,2048)"
    )
    parser.add_argument("--ks", default=None, help="comma-separated K values (default 1,20,50)")
    parser.add_argument("--turn-tokens", type=int, default=64, help="positions the teacher needs (the turn)")
    parser.add_argument("--iters", type=int, default=None, help="requests per cell (default 3)")
    add_server_arguments(parser)


def run_bench(args: argparse.Namespace) -> dict[str, Any]:
    q = args.quick
    lengths = [int(x) for x in (args.lengths or ("64,128" if q else "256,1024,2048")).split(",")]
    ks = [int(x) for x in (args.ks or ("1,5" if q else "1,20,50")).split(",")]
    return asyncio.run(
        run(
            **server_arguments(args),
            lengths=lengths,
            ks=ks,
            turn_tokens=min(args.turn_tokens, min(lengths) // 2),
            iters=pick(args.iters, 3, 1, q),
        )
    )
