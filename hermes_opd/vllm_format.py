"""Pure parsing of vLLM `/v1/completions` response bodies (no I/O).

vLLM 0.32 prompt logprobs: `choices[0].prompt_logprobs` is a list as long as the prompt, entry 0 is
null, every other entry maps a token id (as a string) to `{"logprob", "rank", "decoded_token"}`. It
holds the top-K plus the actual prompt token when that token ranks below K (K or K+1 keys).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from hermes_opd.vllm_errors import UnexpectedResponseError


@dataclass(frozen=True)
class GeneratedSequence:
    """One sampled continuation: exact ids, their logprobs, and why generation stopped."""

    token_ids: list[int]
    logprobs: list[float]
    finish_reason: str
    text: str


@dataclass(frozen=True)
class PromptTopK:
    """Top-K prompt logprobs per position, rank order, plus the actual token when it ranked below K.

    `token_ids[pos]` / `logprobs[pos]` describe the distribution over the token AT `pos` given
    everything before it; position 0 has no entry (empty lists)."""

    prompt_ids: list[int]
    token_ids: list[list[int]]
    logprobs: list[list[float]]


def _snippet(body: Any, limit: int = 300) -> str:
    text = repr(body)
    return text if len(text) <= limit else text[:limit] + "..."


def parse_generated(body: dict[str, Any], expected_n: int) -> list[GeneratedSequence]:
    """Extract ids and sampled-token logprobs from a completions response with
    `return_token_ids=true, logprobs=0`."""
    try:
        choices = sorted(body["choices"], key=lambda c: c.get("index", 0))
        sequences = []
        for choice in choices:
            ids = [int(t) for t in choice["token_ids"]]
            lps = [float(x) for x in choice["logprobs"]["token_logprobs"]]
            if len(lps) != len(ids):
                raise UnexpectedResponseError(
                    f"choice {choice.get('index')} has {len(ids)} token ids but {len(lps)} logprobs"
                )
            sequences.append(
                GeneratedSequence(ids, lps, str(choice.get("finish_reason") or ""), choice.get("text", ""))
            )
    except UnexpectedResponseError:
        raise
    except (KeyError, TypeError, ValueError) as exc:
        raise UnexpectedResponseError(
            f"completions response lacks token_ids/logprobs ({type(exc).__name__}: {exc}); is this vLLM >= 0.10 "
            f"with return_token_ids support? body: {_snippet(body)}"
        ) from exc
    if len(sequences) != expected_n:
        raise UnexpectedResponseError(f"asked for n={expected_n} completions, got {len(sequences)}")
    return sequences


def parse_prompt_topk(body: dict[str, Any], prompt_ids: list[int], k: int) -> PromptTopK:
    """Normalise `prompt_logprobs` into rank-ordered rows; validate length and values."""
    try:
        entries = body["choices"][0]["prompt_logprobs"]
    except (KeyError, IndexError, TypeError) as exc:
        raise UnexpectedResponseError(
            f"response has no choices[0].prompt_logprobs: {_snippet(body)}"
        ) from exc
    if not isinstance(entries, list):
        raise UnexpectedResponseError(f"prompt_logprobs is {type(entries).__name__}, expected a list")
    if len(entries) != len(prompt_ids):
        raise UnexpectedResponseError(
            f"prompt_logprobs has {len(entries)} positions for a prompt of {len(prompt_ids)} tokens"
        )
    ids_rows: list[list[int]] = []
    lp_rows: list[list[float]] = []
    for pos, entry in enumerate(entries):
        if entry is None:
            if pos != 0:
                raise UnexpectedResponseError(f"prompt_logprobs entry {pos} is null; only entry 0 may be")
            ids_rows.append([])
            lp_rows.append([])
            continue
        if not isinstance(entry, dict):
            raise UnexpectedResponseError(
                f"prompt_logprobs entry {pos} is {type(entry).__name__}, expected an object"
            )
        try:
            items = [(int(tok), float(v["logprob"]), int(v.get("rank") or 10**9)) for tok, v in entry.items()]
        except (KeyError, TypeError, ValueError) as exc:
            raise UnexpectedResponseError(
                f"prompt_logprobs entry {pos} is malformed: {_snippet(entry)}"
            ) from exc
        for tok, lp, _ in items:
            if math.isnan(lp) or lp > 1e-4:
                raise UnexpectedResponseError(
                    f"prompt_logprobs entry {pos} token {tok} has invalid logprob {lp}"
                )
        items.sort(key=lambda item: (item[2], -item[1]))
        actual = prompt_ids[pos]
        top = [item for item in items if item[2] <= k][:k]
        if len(top) < min(k, len(items)) and len(items) >= k:
            raise UnexpectedResponseError(f"prompt_logprobs entry {pos} has fewer than k={k} ranked entries")
        if actual not in {item[0] for item in top}:
            actual_items = [item for item in items if item[0] == actual]
            if not actual_items:
                raise UnexpectedResponseError(f"prompt_logprobs entry {pos} lacks the actual token {actual}")
            top.append(actual_items[0])
        ids_rows.append([item[0] for item in top])
        lp_rows.append([item[1] for item in top])
    return PromptTopK(prompt_ids=list(prompt_ids), token_ids=ids_rows, logprobs=lp_rows)
