"""vLLM's own price for the sampled tokens' logprobs, measured beside `hermes-opd bench proxy`.

A recorded turn needs the logprob of every token the policy sampled, so the proxy's record path asks
vLLM for them (`logprobs: 0` on `/v1/completions`, `VLLMCompletionsClient.generate_stream` in
hermes_opd/vllm_api/client.py) and its serve path does not. Whatever vLLM spends computing and
sending those logprobs is in the record path's time over direct vLLM, but it is not the proxy's.

This reference sends exactly the proxy's request for each session's first turn (the prompt ids the
proxy renders, `first_context` in hermes_opd/record/transcript_recorder.py, and the seed the wires
use) straight to vLLM twice, without and with the sampled logprobs, at the same concurrency, in
the bench's rounds; the ratio of the two is the part of the record path's ratio that vLLM charges.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from hermes_opd.bench.stream_timings import timing_ratios, timing_stats
from hermes_opd.record.transcript_recorder import first_context
from hermes_opd.vllm_api.client import VLLMCompletionsClient

VARIANTS = ("without", "with")
"""The two requests: the serve path's (no logprobs) and the record path's (the sampled logprobs)."""


def first_prompts(tokenizer: Any, sessions: int, system: str, user: str) -> list[list[int]]:
    """Each session's first prompt as the proxy renders it; `user` is formatted with the session's
    index, as the bench's sessions write it."""
    return [
        first_context(
            tokenizer,
            [{"role": "system", "content": system}, {"role": "user", "content": user.format(i)}],
            None,
        )
        for i in range(sessions)
    ]


async def _one(
    client: VLLMCompletionsClient, prompt: list[int], max_tokens: int, seed: int, logprobs: bool
) -> tuple[float, float, int]:
    """(wall seconds, seconds to the first sampled id, ids sampled) of one streamed request."""
    started = time.perf_counter()
    first: float | None = None
    count = 0
    async for piece in client.generate_stream(
        prompt, max_tokens=max_tokens, temperature=1.0, seed=seed, sampled_logprobs=logprobs
    ):
        if piece.token_ids and first is None:
            first = time.perf_counter() - started
        count += len(piece.token_ids)
    wall = time.perf_counter() - started
    return wall, first if first is not None else wall, count


async def measure_round(
    client: VLLMCompletionsClient,
    prompts: list[list[int]],
    seeds: list[int],
    max_tokens: int,
    reverse: bool = False,
) -> dict[str, list[tuple[float, float, int]]]:
    """Both variants, one after the other (`reverse`: `with` first, so that alternating rounds put
    any drift on both alike), every session at once within each: each variant's (wall, first id,
    ids) per session."""
    out: dict[str, list[tuple[float, float, int]]] = {}
    for variant in reversed(VARIANTS) if reverse else VARIANTS:
        out[variant] = list(
            await asyncio.gather(
                *(
                    _one(client, prompt, max_tokens, seed, variant == "with")
                    for prompt, seed in zip(prompts, seeds, strict=True)
                )
            )
        )
    return out


def summary(samples: dict[str, list[tuple[float, float, int]]]) -> dict[str, Any]:
    """p50/p95 of each variant's wall and first-id times, and `with` over `without` for each."""
    result: dict[str, Any] = {}
    for variant in VARIANTS:
        walls, firsts, counts = zip(*samples[variant], strict=True)
        result[variant] = timing_stats(list(walls), list(counts), list(firsts))
    result.update(timing_ratios(result["with"], result["without"]))
    return result
