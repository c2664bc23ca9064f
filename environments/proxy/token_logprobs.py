"""The sampled tokens' logprobs a client asked for, in OpenAI's logprob form (pure logic, no I/O).

One entry per sampled token: `{"token", "logprob", "bytes", "top_logprobs": [{"token", "logprob",
"bytes"}, ...]}`, as Chat Completions' `choices[].logprobs.content` and the Responses API's
`output_text` logprobs write them. A token's text is the tokenizer's decoding of that one id, and its
bytes that text's UTF-8, as vLLM's own server writes them (a token that holds part of a character
decodes to U+FFFD). The logprobs are vLLM's, of the very ids it sampled; -inf, which JSON cannot
write, is written -9999.0, as vLLM writes it."""

from __future__ import annotations

from typing import Any


def logprob_entries(
    tokenizer: Any,
    token_ids: list[int],
    logprobs: list[float],
    top_ids: list[list[int]],
    top_logprobs: list[list[float]],
) -> list[dict[str, Any]]:
    """One entry per id, its alternatives from the parallel rows `top_ids` / `top_logprobs`, most
    likely first (both empty when none were asked: each entry's list is empty)."""
    if len(logprobs) != len(token_ids) or (top_ids and len(top_ids) != len(token_ids)):
        raise ValueError(f"{len(token_ids)} ids with {len(logprobs)} logprobs and {len(top_ids)} top rows")
    entries = []
    for index, (token_id, logprob) in enumerate(zip(token_ids, logprobs, strict=True)):
        entry = _entry(tokenizer, token_id, logprob)
        entry["top_logprobs"] = (
            [_entry(tokenizer, i, lp) for i, lp in zip(top_ids[index], top_logprobs[index], strict=True)]
            if top_ids
            else []
        )
        entries.append(entry)
    return entries


def _entry(tokenizer: Any, token_id: int, logprob: float) -> dict[str, Any]:
    text = tokenizer.decode([token_id], skip_special_tokens=False)
    return {"token": text, "logprob": max(logprob, -9999.0), "bytes": list(text.encode("utf-8"))}
