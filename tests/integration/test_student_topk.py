"""The student's own top-K at sampling time (hermes_opd/vllm_api, hermes_opd/contract/student_topk.py):
parsing vLLM's rows, their shapes against the real dev vLLM, and the validator on them.
The tests of its parts that need no server: tests/unit/test_student_topk.py."""

from __future__ import annotations

import math

import pytest

from hermes_opd.contract.student_topk import make_student_topk_block
from hermes_opd.contract.validation import validate_group
from hermes_opd.vllm_api.client import VLLMCompletionsClient


@pytest.mark.integration
async def test_real_rows_have_the_documented_shape_and_pass_the_validator(dev_server, dev_tokenizer):
    k = 4
    client = VLLMCompletionsClient(dev_server.base_url, dev_server.model_name)
    prompt = dev_tokenizer.encode("def fizzbuzz(n):\n    ", add_special_tokens=False)
    try:
        sequences = await client.generate(prompt, n=2, max_tokens=24, seed=3, top_logprobs=k)
    finally:
        await client.close()
    for seq in sequences:
        assert len(seq.top_ids) == len(seq.top_logprobs) == len(seq.token_ids) > 0
        for token, lp, ids, lps in zip(
            seq.token_ids, seq.logprobs, seq.top_ids, seq.top_logprobs, strict=True
        ):
            assert len(ids) == len(set(ids)) == k
            assert lps == sorted(lps, reverse=True)
            if token in ids:
                assert lps[ids.index(token)] == pytest.approx(lp, abs=1e-5)
            else:
                assert lp <= lps[-1] + 1e-5
        tokens = prompt + seq.token_ids
        positions = list(range(len(prompt), len(tokens)))
        group = {
            "tokens": [tokens],
            "masks": [[-100] * len(prompt) + seq.token_ids],
            "scores": [0.0],
            "inference_logprobs": [[1.0] * len(prompt) + seq.logprobs],
            "overrides": [
                {"student_topk": make_student_topk_block(k, positions, seq.top_ids, seq.top_logprobs)}
            ],
        }
        assert validate_group(group, require_provenance=False) == []
        assert all(math.isfinite(v) for row in seq.top_logprobs for v in row)
