"""Which sampling settings training rollouts may use (pure logic).

Every logprob the trainers compare is RAW, i.e. of the temperature-1, untruncated policy: vLLM's
`inference_logprobs` (its default `logprobs_mode`), the teacher's `prompt_logprobs`, and the
student's `log_softmax(logits)` in the trainer. The estimators built on them (the GRPO importance
ratio, the token-level OPD advantage, the sampled-token reverse KL) assume that the tokens were
SAMPLED from that same distribution. A rollout sampled at temperature T != 1, or with top_p < 1,
comes from another distribution, so the ratio against raw logprobs is not the importance weight
and the expected OPD gradient is biased; comparing raw with raw does not fix that. Such rollouts
are refused unless the config says, explicitly, that the bias is accepted.

The check enforces every parameter in `ENFORCED_SAMPLING_PARAMS`: temperature, top_p, top_k, min_p,
repetition_penalty, presence_penalty and frequency_penalty. The env configures the first two; the
others are sent at their neutral values with every rollout request (hermes_opd/vllm_api/
sampling_params.py), so a truncating `generation_config.json` on the server cannot change them.
"""

from __future__ import annotations

from collections.abc import Mapping

from hermes_opd.vllm_api.sampling_params import ENFORCED_SAMPLING_PARAMS, NEUTRAL_SAMPLING_PARAMS, is_neutral

ALLOW_OPTION = "allow_biased_sampling"


def training_sampling_problem(
    temperature: float, top_p: float, others: Mapping[str, float] | None = None
) -> str | None:
    """Why rollouts sampled with (temperature, top_p, `others`) give biased training signal; None
    when they do not. `others` holds the non-configured parameters as a request would send them
    (default: the neutral values the rollout client sends)."""
    others = dict(NEUTRAL_SAMPLING_PARAMS if others is None else others)
    unknown = sorted(set(others) - set(NEUTRAL_SAMPLING_PARAMS))
    if unknown:
        raise ValueError(
            f"not sampling parameters this check knows: {unknown}; it enforces {ENFORCED_SAMPLING_PARAMS}"
        )
    missing = [name for name in NEUTRAL_SAMPLING_PARAMS if name not in others]
    off = [
        f"{name}={others[name]:g}"
        for name in NEUTRAL_SAMPLING_PARAMS
        if name in others and not is_neutral(name, others[name])
    ]
    if temperature == 1.0 and top_p >= 1.0 and not off and not missing:
        return None
    stated = f"temperature={temperature:g}, top_p={top_p:g}" + "".join(f", {item}" for item in off)
    if missing:
        stated += f" ({', '.join(missing)} left to the server's generation config)"
    return (
        f"training rollouts at {stated} are not samples of the "
        "temperature-1 policy whose raw logprobs the trainers compare (inference_logprobs, teacher rows "
        "and the student's logprobs are all raw), so the GRPO ratio and the OPD gradient would be biased. "
        f"Set env.temperature: 1.0 and env.top_p: 1.0, or set env.{ALLOW_OPTION}: true to accept the "
        "bias (docs/trainers.md, Temperature). env.eval_temperature is not affected. Enforced "
        f"parameters: {', '.join(ENFORCED_SAMPLING_PARAMS)}."
    )
