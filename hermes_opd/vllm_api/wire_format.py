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
    finish_reason: str
    text: str


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
