"""The student's own top-K at sampling time (hermes_opd/vllm_api, hermes_opd/contract/student_topk.py):
parsing vLLM's rows and the teacher's logprobs on the student's ids. Their shapes against the real dev vLLM
are in tests/integration/test_student_topk.py."""

from __future__ import annotations

import pytest

from hermes_opd.contract.student_topk import make_student_topk_block
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
    body = {
        "choices": [
            {
                "index": 0,
                "token_ids": [5, 6],
                "finish_reason": "length",
                "text": "",
                "logprobs": {"token_logprobs": [-0.1, -0.2], "top_logprobs": [{"token_id:5": -0.1}]},
            }
        ]
    }
    with pytest.raises(UnexpectedResponseError, match="2 token ids but 1 top-logprob rows"):
        parse_generated(body, 1, top_k=1)
    assert parse_generated(body, 1)[0].top_ids is None  # not asked for: not read


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
