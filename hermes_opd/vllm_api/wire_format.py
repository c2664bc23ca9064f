"""Pure parsing of vLLM `/v1/completions` generation bodies (no I/O).

Prompt-logprob (teacher) bodies are parsed in `scoring/response_parsing.py`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hermes_opd.vllm_api.errors import UnexpectedResponseError


@dataclass(frozen=True)
class GeneratedSequence:
    """One sampled continuation: exact ids, their logprobs, and why generation stopped."""

    token_ids: list[int]
    logprobs: list[float]
    """One per token id; empty when the request asked for none (`sampled_logprobs=False`)."""
    finish_reason: str
    text: str
    top_ids: list[list[int]] | None = None
    """With `top_logprobs=K` asked for: the sampler's top-K ids at each generated position, best first."""
    top_logprobs: list[list[float]] | None = None
    """Their raw logprobs, parallel to `top_ids`."""


def _snippet(body: Any, limit: int = 300) -> str:
    text = repr(body)
    return text if len(text) <= limit else text[:limit] + "..."


TOKEN_ID_PREFIX = "token_id:"
"""How vLLM keys a top-logprob entry with `return_tokens_as_token_ids: true`."""


def parse_top_rows(entries: list[dict[str, float]], k: int) -> tuple[list[list[int]], list[list[float]]]:
    """The top-k rows of vLLM's `logprobs.top_logprobs` (one `{"token_id:ID": logprob}` dict per
    generated token, holding the top k plus the sampled token when it lies outside them), best first.
    The sampled token's own logprob is in `token_logprobs`; an extra (k+1-th) entry is dropped."""
    ids_rows: list[list[int]] = []
    lp_rows: list[list[float]] = []
    for entry in entries:
        pairs = []
        for key, value in entry.items():
            if not key.startswith(TOKEN_ID_PREFIX):
                raise UnexpectedResponseError(
                    f"top_logprobs key {key!r} is not {TOKEN_ID_PREFIX}ID; send return_tokens_as_token_ids"
                )
            pairs.append((int(key[len(TOKEN_ID_PREFIX) :]), float(value)))
        pairs.sort(key=lambda pair: -pair[1])
        ids_rows.append([i for i, _ in pairs[:k]])
        lp_rows.append([v for _, v in pairs[:k]])
    return ids_rows, lp_rows


def parse_generated(
    body: dict[str, Any], expected_n: int, top_k: int = 0, *, sampled_logprobs: bool = True
) -> list[GeneratedSequence]:
    """Extract ids and sampled-token logprobs from a completions response with
    `return_token_ids=true, logprobs=top_k` (and, when top_k > 0, the top-k rows). With
    `sampled_logprobs=False` (a request that asked for none) the logprobs are left empty."""
    try:
        choices = sorted(body["choices"], key=lambda c: c.get("index", 0))
        sequences = []
        for choice in choices:
            ids = [int(t) for t in choice["token_ids"]]
            lps = [float(x) for x in choice["logprobs"]["token_logprobs"]] if sampled_logprobs else []
            if sampled_logprobs and len(lps) != len(ids):
                raise UnexpectedResponseError(
                    f"choice {choice.get('index')} has {len(ids)} token ids but {len(lps)} logprobs"
                )
            top_ids = top_lps = None
            if top_k > 0:
                top_ids, top_lps = parse_top_rows(choice["logprobs"]["top_logprobs"], top_k)
                if len(top_ids) != len(ids):
                    raise UnexpectedResponseError(
                        f"choice {choice.get('index')} has {len(ids)} token ids but {len(top_ids)} top-logprob rows"
                    )
            sequences.append(
                GeneratedSequence(
                    ids, lps, str(choice.get("finish_reason") or ""), choice.get("text", ""), top_ids, top_lps
                )
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
