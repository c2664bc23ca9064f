"""`hermes-opd bench student-topk`: what asking the policy for its own top-K costs at sampling time.

The same generation requests (`n` continuations of up to `--max-tokens` each, `ignore_eos`, seeded, from
fresh prompts of real ids; both sides' generated token counts are reported, since the dev model's
chat end token still stops a continuation) with `logprobs: K` (plus `return_tokens_as_token_ids`) and with `logprobs: 0`, alternating
which goes first, in one run against the same server. Reported: median wall time of each, the
response bytes, and the rows' shapes (every generated position has a row of K ids, best first).

How often a vLLM teacher path leaves a student id unknown: after each `logprobs: K` request, its
first continuation is scored as a hinted teacher would score it (a hint text before the prompt;
`/v1/completions` with `prompt_logprobs: --teacher-k`), and each student top-K id is looked up in the
teacher's row of its position (its top-K plus the sampled token,
`hermes_opd.contract.student_topk.teacher_logprobs_on`). Reported: `student_ids_unknown_frac`,
the share of student ids that row does not hold (their teacher logprob stays unknown).

Also reported: `pair_ratios`, each request pair's with/without ratio (how much the machine's noise
scatters them), and the 1-minute load average at the start (`machine`) and at the end
(`load_avg_1m_end`).

Headline, last key: `with_over_without`, the wall-time ratio (smaller is better; 1.0 is free).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import sys
import time
from typing import Any

from hermes_opd.bench.common import add_server_arguments, machine_info, pick, server_arguments, with_headline
from hermes_opd.bench.teacher_bench import prompt_of_length
from hermes_opd.contract.student_topk import teacher_logprobs_on
from hermes_opd.vllm_api.client import VLLMCompletionsClient
from scoring.alignment import turn_rows
from scoring.request_paths import completions_prompt_topk

TEACHER_HINT = "Hint: run the tests before you answer, and check the empty case.\n"


def _progress(message: str) -> None:
    print(f"[bench student-topk] {message}", file=sys.stderr, flush=True)


async def _timed_generate(
    client: VLLMCompletionsClient, ids: list[int], k: int, n: int, max_tokens: int, seed: int
):
    started = time.perf_counter()
    sequences = await client.generate(
        ids,
        n=n,
        max_tokens=max_tokens,
        temperature=1.0,
        seed=seed,
        top_logprobs=k,
        extra={"ignore_eos": True},
    )
    return time.perf_counter() - started, sequences


async def run(
    *,
    base_url: str,
    model: str,
    tokenizer_dir: str,
    k: int,
    n: int,
    max_tokens: int,
    prompt_tokens: int,
    iters: int,
    teacher_k: int = 50,
) -> dict[str, Any]:
    from transformers import AutoTokenizer

    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    machine = machine_info()  # its load average is the one at the start
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    salt = random.SystemRandom().randrange(1, 1 << 30)
    client = VLLMCompletionsClient(base_url, model, timeout_s=300.0)
    times: dict[str, list[float]] = {"with_s": [], "without_s": []}
    positions = rows_ok = 0
    tokens = {"with": 0, "without": 0}
    lookups = {"ids": 0, "unknown": 0}
    hint = tokenizer.encode(TEACHER_HINT, add_special_tokens=False)
    try:
        await _timed_generate(
            client, prompt_of_length(tokenizer, prompt_tokens, salt - 1), k, n, max_tokens, 0
        )
        for i in range(iters):
            ids = prompt_of_length(tokenizer, prompt_tokens, salt + i)
            order = (k, 0) if i % 2 == 0 else (0, k)
            for asked in order:
                wall, sequences = await _timed_generate(client, ids, asked, n, max_tokens, seed=salt + i)
                times["with_s" if asked else "without_s"].append(wall)
                tokens["with" if asked else "without"] += sum(len(seq.token_ids) for seq in sequences)
                if asked:
                    first = sequences[0]
                    teacher_ids = hint + ids + first.token_ids
                    raw = await completions_prompt_topk(
                        client, teacher_ids, teacher_k, from_pos=len(hint + ids)
                    )
                    t_ids, t_lps = turn_rows(raw.topk, len(hint + ids), first.token_ids, teacher_k)
                    _, unknown = teacher_logprobs_on(first.top_ids, t_ids, t_lps)
                    lookups["ids"] += sum(len(row) for row in first.top_ids)
                    lookups["unknown"] += unknown
                    for seq in sequences:
                        for token, lp, row_ids, row_lps in zip(
                            seq.token_ids, seq.logprobs, seq.top_ids, seq.top_logprobs, strict=True
                        ):
                            positions += 1
                            in_row = token not in row_ids or abs(row_lps[row_ids.index(token)] - lp) <= 1e-4
                            rows_ok += int(
                                len(row_ids) == k and row_lps == sorted(row_lps, reverse=True) and in_row
                            )
    finally:
        await client.close()
    with_s, without_s = statistics.median(times["with_s"]), statistics.median(times["without_s"])
    _progress(f"logprobs={k}: {with_s:.3f} s, without: {without_s:.3f} s")
    pair_ratios = [round(w / wo, 3) for w, wo in zip(times["with_s"], times["without_s"], strict=True)]
    result = {
        "machine": machine,
        "k": k,
        "n": n,
        "max_tokens": max_tokens,
        "prompt_tokens": prompt_tokens,
        "iters": iters,
        "with_s": with_s,
        "without_s": without_s,
        "generated_tokens_with": tokens["with"],
        "generated_tokens_without": tokens["without"],
        "generated_positions": positions,
        "rows_well_formed": rows_ok,
        "teacher_k": teacher_k,
        "student_ids_looked_up": lookups["ids"],
        "student_ids_unknown": lookups["unknown"],
        "student_ids_unknown_frac": lookups["unknown"] / max(lookups["ids"], 1),
        "pair_ratios": pair_ratios,
        "load_avg_1m_end": os.getloadavg()[0],
    }
    return with_headline(result, "with_over_without", with_s / without_s)


# -- `hermes-opd bench student-topk` (hermes_opd/bench/cli.py) --------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--k", type=int, default=4, help="the student's top-K (OpenClaw-RL's default 4)")
    parser.add_argument("--n", type=int, default=None, help="continuations per request (default 8; quick 2)")
    parser.add_argument(
        "--max-tokens", type=int, default=None, help="tokens per continuation (default 128; quick 16)"
    )
    parser.add_argument("--prompt-tokens", type=int, default=None, help="default 512 (quick 64)")
    parser.add_argument("--iters", type=int, default=None, help="request pairs (default 6; quick 2)")
    parser.add_argument(
        "--teacher-k", type=int, default=50, help="the teacher's top-K for the unknown-id count"
    )
    add_server_arguments(parser)


def run_bench(args: argparse.Namespace) -> dict[str, Any]:
    q = args.quick
    return asyncio.run(
        run(
            **server_arguments(args),
            k=args.k,
            n=pick(args.n, 8, 2, q),
            max_tokens=pick(args.max_tokens, 128, 16, q),
            prompt_tokens=pick(args.prompt_tokens, 512, 64, q),
            iters=pick(args.iters, 6, 2, q),
            teacher_k=args.teacher_k,
        )
    )
