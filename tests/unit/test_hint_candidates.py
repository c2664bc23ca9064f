"""Scoring m candidate hints at about the cost of one (scoring/transformers_scorer.py
`score_shared_prefix`), and `hermes-opd bench hint-selection` in process. Against the dev vLLM: in
tests/integration/test_hint_candidates.py."""

from __future__ import annotations

import pytest

from hermes_opd.bench.hint_selection_bench import candidate_inputs
from scoring.transformers_scorer import TransformersTeacher, shared_prefix_len
from tests.support.bench import assert_shape, run_bench


def test_shared_prefix_len():
    assert shared_prefix_len([[1, 2, 3, 4], [1, 2, 5], [1, 2, 3]]) == 2
    assert shared_prefix_len([[1, 2], [1, 2]]) == 2
    assert shared_prefix_len([[7], [8]]) == 0
    assert shared_prefix_len([]) == 0


def test_shared_prefix_rows_equal_separately_scored_rows(dev_model_dir, dev_tokenizer):
    teacher = TransformersTeacher(str(dev_model_dir), 8, threads=1)
    inputs = candidate_inputs(dev_tokenizer, 300, 20, 16, 3, seed=5)
    assert len({len(ids) for ids, _ in inputs}) == 3  # hints of different lengths: ragged suffixes
    separate = [teacher.score_batch([item])[0] for item in inputs]
    before = teacher.batches
    reused = teacher.score_shared_prefix(inputs)
    assert teacher.batches == before + 1  # one call: the prefix once, the three suffixes together
    for (ids_a, lps_a), (ids_b, lps_b), (ids, prompt_len) in zip(reused, separate, inputs, strict=True):
        assert len(ids_a) == len(ids) - prompt_len
        for row_a, row_b in zip(ids_a, ids_b, strict=True):
            assert row_a[:8] == row_b[:8]
        worst = max(
            abs(x - y) for ra, rb in zip(lps_a, lps_b, strict=True) for x, y in zip(ra, rb, strict=True)
        )
        assert worst <= 1e-5


def test_shared_prefix_stops_before_the_first_turn_row(dev_model_dir):
    # Identical candidates share everything: the prefix must still end at prompt_len - 1, so every
    # turn row comes from the candidates' own (here one-id) suffixes.
    teacher = TransformersTeacher(str(dev_model_dir), 4, threads=1)
    item = (list(range(10, 60)) + [70, 71, 72], 50)
    reused = teacher.score_shared_prefix([item, item])
    (ids_s, lps_s) = teacher.score_batch([item])[0]
    for ids_r, lps_r in reused:
        assert [r[:4] for r in ids_r] == [r[:4] for r in ids_s] and len(ids_r) == 3
        assert lps_r[0][0] == pytest.approx(lps_s[0][0], abs=1e-5)


def test_hint_selection_bench_quick_in_process(capsys, dev_model_dir):
    argv = ["hint-selection", "--quick", "--paths", "transformers", "--tokenizer", str(dev_model_dir)]
    result = run_bench(capsys, argv)
    assert_shape(result, "candidates_over_single")
    cell = result["paths"]["transformers"]
    assert result["best_path"] == "transformers" and result["m"] == 3
    assert cell["max_abs_diff_vs_separate"] <= 1e-4
    assert result["candidates_over_single"] == cell["candidates_over_single"]
