"""The student's own top-K at sampling time (hermes_opd/vllm_api, hermes_opd/contract/student_topk.py):
parsing vLLM's rows, their shapes against the real dev vLLM, and the validator on them."""

from __future__ import annotations

import math

import pytest

from hermes_opd.contract.student_topk import make_student_topk_block
from hermes_opd.contract.validation import validate_group
from hermes_opd.vllm_api.client import VLLMCompletionsClient
from hermes_opd.vllm_api.errors import UnexpectedResponseError
from hermes_opd.vllm_api.wire_format import parse_generated, parse_top_rows


def test_parse_top_rows_best_first_and_drops_the_extra_sampled_entry():
    entries = [
        {"token_id:7": -0.5, "token_id:3": -1.5},
        {"token_id:9": -3.0, "token_id:1": -0.2, "token_id:4": -0.9},  # k + 1: the sampled 9 outside
    ]
    assert parse_top_rows(entries, 2) == ([[7, 3], [1, 4]], [[-0.5, -1.5], [-0.2, -0.9]])
    with pytest.raises(UnexpectedResponseError, match="return_tokens_as_token_ids"):
        parse_top_rows([{"hello": -0.1}], 2)


def test_parse_generated_checks_one_row_per_token():
    body = {"choices": [{"index": 0, "token_ids": [5, 6], "finish_reason": "length", "text": "",
                         "logprobs": {"token_logprobs": [-0.1, -0.2],
                                      "top_logprobs": [{"token_id:5": -0.1}]}}]}  # fmt: skip
    with pytest.raises(UnexpectedResponseError, match="2 token ids but 1 top-logprob rows"):
        parse_generated(body, 1, top_k=1)
    assert parse_generated(body, 1)[0].top_ids is None  # not asked for: not read


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


def test_teacher_logprobs_on_student_ids_mark_unknown_ids_as_null():
    from hermes_opd.contract.student_topk import teacher_logprobs_on

    rows, unknown = teacher_logprobs_on(
        [[3, 7], [4, 8], [1, 2]],
        [[3, 9, 7], [5, 4], []],  # the teacher's top-K (+ the sampled token); no row at the last position
        [[-0.5, -1.0, -2.0], [-0.1, -3.0], []],
    )
    assert rows == [[-0.5, -2.0], [-3.0, None], []]
    assert unknown == 1
    block = make_student_topk_block(2, [5, 6, 7], [[3, 7], [4, 8], [1, 2]], [[-0.1, -1.0]] * 3, rows)
    assert block["teacher_unknown"] == 1
