"""The teacher's HTTP request paths to a vLLM server: what each one sends, and how its body is read.

- `completions`: `POST /v1/completions` with `prompt_logprobs: K, max_tokens: 1`, any vLLM.
- `generate`: `POST /inference/v1/generate` (vLLM started with `--enable-scale-out`), token ids in,
  `sampling_params.detokenize: false`, so vLLM builds the same rows without decoding a string per
  candidate (about 3x less server CPU per position on the dev model); rows are read by token id.

Both return a row for every prompt position (vLLM has no "rows from position p on" for top-K);
the client parses only the rows from `from_pos` on (the turn's). Payload builders are pure; the
`*_prompt_topk` functions do the I/O through `VLLMCompletionsClient.post` (retries, error types).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hermes_opd.vllm_api.client import VLLMCompletionsClient, root_url
from scoring.response_parsing import PromptTopK, parse_prompt_topk_json, parse_turn_rows_from_tail

GENERATE_PATH = "/inference/v1/generate"


def completions_payload(model: str, prompt_ids: list[int], k: int) -> dict[str, Any]:
    return {
        "model": model,
        "prompt": list(prompt_ids),
        "max_tokens": 1,
        "temperature": 0.0,
        "prompt_logprobs": k,
    }


def generate_payload(model: str, prompt_ids: list[int], k: int) -> dict[str, Any]:
    return {
        "model": model,
        "token_ids": list(prompt_ids),
        "sampling_params": {"max_tokens": 1, "temperature": 0.0, "prompt_logprobs": k, "detokenize": False},
    }


def _check(prompt_ids: list[int], k: int) -> None:
    if not prompt_ids:
        raise ValueError("prompt_ids is empty")
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")


@dataclass(frozen=True)
class RawTopK:
    """Parsed rows plus the size of the body they came in (for metrics and benchmarks)."""

    topk: PromptTopK
    body_bytes: int


async def _post_prompt_topk(
    client: VLLMCompletionsClient, path: str, payload: dict, ids: list[int], k: int, from_pos: int, route: str
) -> RawTopK:
    """The turn's rows read from the end of the body on the event loop (about a millisecond; a
    thread hop costs more); a body that only a whole-body decode can read goes through
    `client.decode_body` (a worker thread when it is large), with the same rows or errors."""
    sizes: list[int] = []

    def tail_or_body(raw: bytes) -> PromptTopK | bytes:
        sizes.append(len(raw))
        rows = parse_turn_rows_from_tail(raw, ids, k, from_pos=from_pos, route=route)
        return raw if rows is None else rows

    read = await client.post(path, payload, tail_or_body, root=route == "generate", decode_on_loop=True)
    if isinstance(read, bytes):
        read = await client.decode_body(
            read, lambda raw: parse_prompt_topk_json(raw, ids, k, from_pos=from_pos, route=route)
        )
    return RawTopK(read, sizes[-1])


async def completions_prompt_topk(
    client: VLLMCompletionsClient, prompt_ids: list[int], k: int, *, from_pos: int = 0
) -> RawTopK:
    """Top-k prompt logprobs through `/v1/completions`; rows before `from_pos` are left empty."""
    _check(prompt_ids, k)
    ids = list(prompt_ids)
    payload = completions_payload(client.model, ids, k)
    return await _post_prompt_topk(client, "/completions", payload, ids, k, from_pos, "completions")


async def generate_prompt_topk(
    client: VLLMCompletionsClient, prompt_ids: list[int], k: int, *, from_pos: int = 0
) -> RawTopK:
    """Top-k prompt logprobs through `/inference/v1/generate` (detokenize off)."""
    _check(prompt_ids, k)
    ids = list(prompt_ids)
    payload = generate_payload(client.model, ids, k)
    return await _post_prompt_topk(client, GENERATE_PATH, payload, ids, k, from_pos, "generate")


def generate_url(client: VLLMCompletionsClient) -> str:
    return root_url(client.base_url) + GENERATE_PATH
