"""Which sampling settings training rollouts may use (pure logic).

Every logprob the trainers compare is RAW, i.e. of the temperature-1, untruncated policy: vLLM's
`inference_logprobs` (its default `logprobs_mode`), the teacher's `prompt_logprobs`, and the
student's `log_softmax(logits)` in the trainer. The estimators built on them (the GRPO importance
ratio, the token-level OPD advantage, the sampled-token reverse KL) assume that the tokens were
SAMPLED from that same distribution. A rollout sampled at temperature T != 1, or with top_p < 1,
comes from another distribution, so the ratio against raw logprobs is not the importance weight
and the expected OPD gradient is biased; comparing raw with raw does not fix that. Such rollouts
are refused unless the config says, explicitly, that the bias is accepted.
"""

from __future__ import annotations

ALLOW_OPTION = "allow_biased_sampling"


def training_sampling_problem(temperature: float, top_p: float) -> str | None:
    """Why rollouts sampled with (temperature, top_p) give biased training signal; None when they
    do not (temperature 1, top_p 1)."""
    if temperature == 1.0 and top_p >= 1.0:
        return None
    return (
        f"training rollouts at temperature={temperature:g}, top_p={top_p:g} are not samples of the "
        "temperature-1 policy whose raw logprobs the trainers compare (inference_logprobs, teacher rows "
        "and the student's logprobs are all raw), so the GRPO ratio and the OPD gradient would be biased. "
        f"Set env.temperature: 1.0 and env.top_p: 1.0, or set env.{ALLOW_OPTION}: true to accept the "
        "bias (docs/trainers.md, Temperature). env.eval_temperature is not affected."
    )
