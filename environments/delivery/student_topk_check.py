"""Setup check of `student_topk_k`: the policy server must return K logprobs per generated token.

vLLM refuses a request for more logprobs than its `--max-logprobs` (default 20). One 1-token
generation at setup turns that refusal into a config error that names the knob and the flag, instead
of failing every rollout of the run."""

from __future__ import annotations

from typing import Any

from hermes_opd.contract.errors import ConfigError
from hermes_opd.vllm_api.client import VLLMCompletionsClient
from hermes_opd.vllm_api.errors import MaxLogprobsTooLowError

PROBE_TEXT = "def solve():"
"""The prompt of the probe generation (any short text the policy's tokenizer encodes)."""


async def check_policy_top_logprobs(client: VLLMCompletionsClient, k: int, tokenizer: Any) -> None:
    """Raise ConfigError unless the policy server answers `logprobs: k` with rows of k ids."""
    probe_ids = list(tokenizer.encode(PROBE_TEXT, add_special_tokens=False)) or [0, 1]
    try:
        sequences = await client.generate(probe_ids, max_tokens=1, top_logprobs=k)
    except MaxLogprobsTooLowError as exc:
        raise ConfigError(
            f"env.student_topk_k={k} asks the policy server at {client.base_url} for {k} logprobs per "
            f"generated token, and it refused ({exc}). Start the policy vLLM with `--max-logprobs {k}` or "
            "higher, or lower env.student_topk_k (0 turns it off)."
        ) from exc
    rows = sequences[0].top_ids or []
    if not rows or len(rows[0]) != k:
        raise ConfigError(
            f"env.student_topk_k={k}: the policy server at {client.base_url} answered `logprobs: {k}` with "
            f"{len(rows[0]) if rows else 0} ids per row, not {k}"
        )
