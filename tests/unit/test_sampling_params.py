"""The rollout client sends every sampling parameter at its neutral value
(hermes_opd/vllm_api/sampling_params.py); what that buys against a truncating generation config is
tests/integration/test_untruncated_sampling.py."""

from __future__ import annotations

from hermes_opd.vllm_api.sampling_params import ENFORCED_SAMPLING_PARAMS, NEUTRAL_SAMPLING_PARAMS


def test_every_enforced_parameter_is_sent_at_its_neutral_value():
    from hermes_opd.vllm_api.sampling_params import explicit_sampling_params

    params = explicit_sampling_params(1.0, 1.0)
    assert tuple(params) == ENFORCED_SAMPLING_PARAMS
    assert params == {
        "temperature": 1.0,
        "top_p": 1.0,
        "top_k": -1,
        "min_p": 0.0,
        "repetition_penalty": 1.0,
        "presence_penalty": 0.0,
        "frequency_penalty": 0.0,
    }
    assert set(NEUTRAL_SAMPLING_PARAMS) | {"temperature", "top_p"} == set(ENFORCED_SAMPLING_PARAMS)
