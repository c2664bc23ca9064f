"""`hermes-opd bench payload`: bytes on the wire of the distill fields, ours against the reference's.

On real groups (collected from the dev vLLM server with `AgenticOPDEnv`, as a trainer would get them,
or read from `--groups FILE`), the distill fields `distill_token_ids` / `distill_logprobs` are
serialized in three forms:
- `ours`: the contract (docs/distill-format.md): an EMPTY row where there is no teacher data, top-K
  plus the student token where there is, logprobs as the shortest decimal that round-trips float32;
- `dense`: the reference's zero-padded [T][K] arrays: every position gets K ids and K logprobs, 0 and
  0.0 where there is no teacher data, logprobs printed as vLLM hands them over (the float64 repr of
  the float32 value, e.g. -1.409581184387207);
- `dense_k1`: `hermes_opd.contract.rows.to_dense_k1` (one entry per position, for stock
  tinker-atropos).
For each: raw JSON bytes (`json.dumps` with its default separators, as aiohttp's `json=` sends
them), gzip bytes (level 6), and encode/decode times (best of a few). It also checks that every
logprob in `ours` is printed with no more significant digits than float32 round-tripping needs.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from hermes_opd.bench.common import add_server_arguments, machine_info, pick, server_arguments, with_headline
from hermes_opd.contract.rows import to_dense_k1

GZIP_LEVEL = 6


def _progress(message: str) -> None:
    print(f"[bench payload] {message}", file=sys.stderr, flush=True)


# -- inputs ---------------------------------------------------------------------------------------
def load_groups(path: str) -> list[dict[str, Any]]:
    """Groups from a JSONL file (one group per line) or a JSON file holding one group or a list."""
    text = Path(path).read_text(encoding="utf-8")
    stripped = text.lstrip()
    if stripped.startswith("["):
        return list(json.loads(text))
    try:
        return [json.loads(text)]
    except json.JSONDecodeError:
        return [json.loads(line) for line in text.splitlines() if line.strip()]


async def collect_groups(
    n_groups: int,
    group_size: int,
    base_url: str,
    model: str,
    tokenizer_dir: str,
    max_turns: int | None = None,
) -> list[dict[str, Any]]:
    """Real groups from the dev server with the env itself (rules judge, teacher = the dev server)."""
    from environments.atropos.agentic_opd_env import AgenticOPDEnv

    cfg, servers = AgenticOPDEnv.config_init()
    cfg.tokenizer_name = tokenizer_dir
    cfg.group_size = group_size
    cfg.include_messages = False
    if max_turns is not None:
        cfg.max_turns = max_turns
    cfg.metrics_path = str(Path(tempfile.mkdtemp(prefix="bench-payload-")) / "metrics.jsonl")
    servers[0].base_url = base_url
    servers[0].model_name = model
    servers[0].tokenizer_name = tokenizer_dir
    env = AgenticOPDEnv(cfg, servers)
    await env.setup()
    groups = []
    for i in range(n_groups):
        started = time.perf_counter()
        item = await env.get_next_item()
        group, _ = await env.collect_trajectories(item)
        scored = sum(1 for rows in group["distill_token_ids"] for row in rows if row)
        _progress(
            f"group {i + 1}/{n_groups}: {len(group['tokens'])} sequences, {scored} scored positions, "
            f"{time.perf_counter() - started:.1f}s"
        )
        groups.append(group)
    await env.close()
    return groups


# -- the three forms --------------------------------------------------------------------------------
def vllm_float(value: float) -> float:
    """The float the reference holds: vLLM's float32 logprob widened to float64 (long repr)."""
    return float(np.float32(value))


def dense_form(group: dict[str, Any], k: int) -> dict[str, Any]:
    """The reference's zero-padded [T][K] arrays (top-K only: the reference has no K+1-th entry)."""
    ids_out, lps_out = [], []
    for ids_rows, lp_rows in zip(group["distill_token_ids"], group["distill_logprobs"], strict=True):
        seq_ids, seq_lps = [], []
        for row_ids, row_lps in zip(ids_rows, lp_rows, strict=True):
            top_ids = list(row_ids[:k])
            top_lps = [vllm_float(x) for x in row_lps[:k]]
            seq_ids.append(top_ids + [0] * (k - len(top_ids)))
            seq_lps.append(top_lps + [0.0] * (k - len(top_lps)))
        ids_out.append(seq_ids)
        lps_out.append(seq_lps)
    return {"distill_token_ids": ids_out, "distill_logprobs": lps_out}


def dense_k1_form(group: dict[str, Any]) -> dict[str, Any]:
    ids_out, lps_out = [], []
    for seq in range(len(group["tokens"])):
        ids, lps = to_dense_k1(
            group["tokens"][seq],
            group["masks"][seq],
            group["inference_logprobs"][seq],
            group["distill_token_ids"][seq],
            group["distill_logprobs"][seq],
        )
        ids_out.append(ids)
        lps_out.append(lps)
    return {"distill_token_ids": ids_out, "distill_logprobs": lps_out}


def ours_form(group: dict[str, Any]) -> dict[str, Any]:
    return {"distill_token_ids": group["distill_token_ids"], "distill_logprobs": group["distill_logprobs"]}


def group_k(groups: list[dict[str, Any]]) -> int:
    for group in groups:
        for override in group.get("overrides") or []:
            opd = (override or {}).get("opd") or {}
            if isinstance(opd.get("k"), int):
                return opd["k"]
    return 50


# -- measurements --------------------------------------------------------------------------------
def _best(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return min(times)


def measure(forms: list[dict[str, Any]], repeats: int) -> dict[str, float]:
    raw = [json.dumps(form).encode() for form in forms]
    zipped = [gzip.compress(r, compresslevel=GZIP_LEVEL) for r in raw]
    return {
        "raw_bytes": sum(len(r) for r in raw),
        "gzip_bytes": sum(len(z) for z in zipped),
        "encode_s": _best(lambda: [json.dumps(form).encode() for form in forms], repeats),
        "decode_s": _best(lambda: [json.loads(r) for r in raw], repeats),
        "gzip_s": _best(lambda: [gzip.compress(r, compresslevel=GZIP_LEVEL) for r in raw], repeats),
    }


def significant_digits(text: str) -> int:
    """Significant digits of a decimal literal ('-0.0012345' -> 5, '1.5e-05' -> 2)."""
    digits = text.lower().split("e")[0].lstrip("-+").replace(".", "").strip("0")
    return max(1, len(digits))


def float_format_check(groups: list[dict[str, Any]]) -> dict[str, Any]:
    """Every logprob of `ours` as printed vs the shortest decimal that round-trips its float32 value."""
    values = [lp for g in groups for rows in g["distill_logprobs"] for row in rows for lp in row]
    if not values:
        return {
            "logprobs": 0,
            "float32_shortest_share": 1.0,
            "excess_digit_values": 0,
            "max_significant_digits": 0,
        }
    excess = 0
    shortest_count = 0
    max_digits = 0
    chars = 0
    for value in values:
        printed = json.dumps(value)
        chars += len(printed)
        shortest = np.format_float_scientific(np.float32(value), unique=True)
        shortest_count += int(float(shortest) == value)  # printed = the float32's shortest decimal
        digits = significant_digits(printed)
        max_digits = max(max_digits, digits)
        excess += int(digits > significant_digits(shortest))
    vllm_chars = sum(len(json.dumps(vllm_float(v))) for v in values)
    return {
        "logprobs": len(values),
        "float32_shortest_share": shortest_count / len(values),
        "excess_digit_values": excess,
        "max_significant_digits": max_digits,
        "chars_per_logprob_ours": chars / len(values),
        "chars_per_logprob_vllm_repr": vllm_chars / len(values),
    }


def run(
    *,
    groups_path: str | None,
    collect: int,
    group_size: int,
    base_url: str,
    model: str,
    tokenizer_dir: str,
    quick: bool = False,
) -> dict[str, Any]:
    if groups_path:
        groups = load_groups(groups_path)
        source = f"file {groups_path}"
    else:
        groups = asyncio.run(
            collect_groups(
                collect, group_size, base_url, model, tokenizer_dir, max_turns=2 if quick else None
            )
        )
        source = f"collected from {base_url} with AgenticOPDEnv (rules judge)"
    k = group_k(groups)
    repeats = 1 if quick else 5
    ours = measure([ours_form(g) for g in groups], repeats)
    dense = measure([dense_form(g, k) for g in groups], repeats)
    dense_k1 = measure([dense_k1_form(g) for g in groups], repeats)
    positions = sum(len(seq) for g in groups for seq in g["tokens"])
    scored = sum(1 for g in groups for rows in g["distill_token_ids"] for row in rows if row)
    result: dict[str, Any] = {
        "bench": "payload",
        "source": source,
        "groups": len(groups),
        "sequences": sum(len(g["tokens"]) for g in groups),
        "positions": positions,
        "scored_positions": scored,
        "scored_share": scored / positions if positions else 0.0,
        "k": k,
        "gzip_level": GZIP_LEVEL,
        "ours": ours,
        "dense": dense,
        "dense_k1": dense_k1,
        "float_format": float_format_check(groups),
        "machine": machine_info(),
        "gzip_dense_over_ours": dense["gzip_bytes"] / ours["gzip_bytes"],
        "encode_dense_over_ours": dense["encode_s"] / ours["encode_s"],
        "decode_dense_over_ours": dense["decode_s"] / ours["decode_s"],
    }
    return with_headline(result, "raw_dense_over_ours", dense["raw_bytes"] / ours["raw_bytes"])


# -- `hermes-opd bench payload` (hermes_opd/bench/cli.py) -------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--groups", default=None, help="groups JSONL (or a JSON group); default: collect real groups"
    )
    parser.add_argument(
        "--collect", type=int, default=None, help="groups to collect from the dev server (default 2)"
    )
    parser.add_argument(
        "--group-size", type=int, default=None, help="rollouts per collected group (default 4)"
    )
    add_server_arguments(parser)


def run_bench(args: argparse.Namespace) -> dict[str, Any]:
    q = args.quick
    return run(
        groups_path=args.groups,
        collect=pick(args.collect, 2, 1, q),
        group_size=pick(args.group_size, 4, 2, q),
        **server_arguments(args),
        quick=q,
    )
