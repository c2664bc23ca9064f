"""Training rollouts at temperature != 1 or top_p < 1 are refused unless the bias is accepted."""

from __future__ import annotations

import pytest
import torch
from pydantic import ValidationError

from environments.atropos.agentic_opd_config import AgenticOPDConfig
from environments.pipeline.sampling_check import training_sampling_problem


def _expected_opd_gradient(sample_temperature: float) -> torch.Tensor:
    """E_{y ~ q}[-A(y) d log p(y)] exactly (a sum over a 5-token vocabulary), A = log p_t - log p,
    with q the student at `sample_temperature` and p, p_t the raw student and teacher."""
    logits = torch.tensor([2.0, 1.0, 0.5, 0.0, -1.0], requires_grad=True)
    teacher = torch.log_softmax(torch.tensor([1.0, 2.0, 0.0, 0.5, -0.5]), -1)
    logp = torch.log_softmax(logits, -1)
    q = torch.softmax(logits.detach() / sample_temperature, -1)
    (grad,) = torch.autograd.grad(-(q * (teacher - logp).detach() * logp).sum(), logits)
    return grad


@pytest.mark.parametrize(("temperature", "error"), [(0.7, 0.1278), (0.6, 0.1836)])
def test_raw_logprobs_with_tempered_samples_bias_the_opd_gradient(temperature, error):
    """Why the refusal: comparing raw with raw is not enough when the tokens came from p_T."""
    unbiased = _expected_opd_gradient(1.0)
    biased = _expected_opd_gradient(temperature)
    assert ((biased - unbiased).norm() / unbiased.norm()).item() == pytest.approx(error, abs=5e-4)


@pytest.mark.parametrize(("temperature", "top_p"), [(0.7, 1.0), (1.2, 1.0), (1.0, 0.9), (0.0, 1.0)])
def test_biased_training_sampling_is_refused_with_the_options_named(temperature, top_p):
    with pytest.raises(ValidationError) as info:
        AgenticOPDConfig(temperature=temperature, top_p=top_p)
    message = str(info.value)
    assert f"temperature={temperature:g}, top_p={top_p:g}" in message
    assert "env.temperature: 1.0 and env.top_p: 1.0" in message
    assert "env.allow_biased_sampling: true" in message
    config = AgenticOPDConfig(temperature=temperature, top_p=top_p, allow_biased_sampling=True)
    assert config.temperature == temperature and config.top_p == top_p


def test_unbiased_defaults_and_eval_temperature_are_accepted():
    assert training_sampling_problem(1.0, 1.0) is None
    config = AgenticOPDConfig(eval_temperature=0.0)
    assert (config.temperature, config.top_p, config.allow_biased_sampling) == (1.0, 1.0, False)


def test_every_enforced_parameter_is_checked_and_named():
    from hermes_opd.vllm_api.sampling_params import ENFORCED_SAMPLING_PARAMS, NEUTRAL_SAMPLING_PARAMS

    assert training_sampling_problem(1.0, 1.0, NEUTRAL_SAMPLING_PARAMS) is None
    assert training_sampling_problem(1.0, 1.0, {**NEUTRAL_SAMPLING_PARAMS, "top_k": 0}) is None
    problem = training_sampling_problem(1.0, 1.0, {**NEUTRAL_SAMPLING_PARAMS, "top_k": 1, "min_p": 0.1})
    assert "top_k=1, min_p=0.1" in problem
    assert (
        "Enforced parameters: temperature, top_p, top_k, min_p, repetition_penalty, presence_penalty, "
        "frequency_penalty." in problem
    )
    missing = {k: v for k, v in NEUTRAL_SAMPLING_PARAMS.items() if k != "repetition_penalty"}
    assert "(repetition_penalty left to the server's generation config)" in training_sampling_problem(
        1.0, 1.0, missing
    )
    with pytest.raises(ValueError, match="not sampling parameters this check knows: \\['seed'\\]"):
        training_sampling_problem(1.0, 1.0, {"seed": 1})
    assert len(ENFORCED_SAMPLING_PARAMS) == 7
