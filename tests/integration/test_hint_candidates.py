"""Scoring m candidate hints at about the cost of one (scoring/transformers_scorer.py
`score_shared_prefix`), and `hermes-opd bench hint-selection`.
The tests of its parts that need no server: tests/unit/test_hint_candidates.py."""

from __future__ import annotations

import pytest

from tests.support.bench import assert_shape, run_bench


@pytest.mark.integration
def test_hint_selection_bench_quick_every_path(capsys, dev_server):
    argv = [
        "hint-selection",
        "--quick",
        "--policy-url",
        dev_server.base_url,
        "--model",
        dev_server.model_name,
        "--tokenizer",
        str(dev_server.model_dir),
    ]
    result = run_bench(capsys, argv)
    assert_shape(result, "candidates_over_single")
    assert set(result["paths"]) >= {"transformers", "completions"}
    assert result["vllm_plain_prefill"]["fresh_s"] > 0
