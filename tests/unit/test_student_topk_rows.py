"""The student's sampling-time top-K from generation to group (hermes_opd/record/student_topk_rows.py):
rows aligned to token positions, carried by the recorder, written by the group builder, and the
in-process teacher's exact logprobs on those ids (scoring/transformers_scorer.py `*_on`)."""

from __future__ import annotations

import math

import pytest
import torch

from environments.delivery.group_builder import FinishedRollout, build_group
from environments.pipeline.opd_config import OPDConfig
from environments.pipeline.opd_pipeline import SequenceDistill
from hermes_opd.contract.constants import MASKED
from hermes_opd.contract.rows import empty_rows
from hermes_opd.contract.validation import validate_group
from hermes_opd.devkit.dev_corpus import DEV_TOOLS
from hermes_opd.record.student_topk_rows import generation_rows, student_topk_block
from hermes_opd.record.trajectory import Trajectory, TurnSpan
from hermes_opd.record.transcript_recorder import TranscriptRecorder
from scoring.transformers_scorer import TransformersTeacher
from tests.support.oracle import full_logprobs

LN = math.log


def test_generation_rows_sit_at_the_generated_positions():
    rows = generation_rows(
        10,
        [5, 9, 2],
        [LN(0.5), LN(0.1), LN(0.7)],
        [[5, 3], [3, 4], [2, 6]],  # 9 was sampled outside its row's top-2: allowed
        [[LN(0.5), LN(0.2)], [LN(0.6), LN(0.2)], [LN(0.7), LN(0.1)]],
    )
    assert list(rows) == [10, 11, 12]
    assert rows[10] == ([5, 3], [LN(0.5), LN(0.2)])
    assert rows[11] == ([3, 4], [LN(0.6), LN(0.2)])
    assert rows[12][0] == [2, 6]


@pytest.mark.parametrize(
    ("top_ids", "top_lps", "message"),
    [
        ([[5, 3]], [[LN(0.5), LN(0.2)]], "one row per generated token"),
        ([[5, 3], [3]], [[LN(0.5), LN(0.2)], [LN(0.6), LN(0.2)]], "2 top ids but 1|1 top ids but 2"),
        # the sampled 9 at logprob ln 0.1 sits in its row at ln 0.3: not this generation's row
        ([[5, 3], [9, 4]], [[LN(0.5), LN(0.2)], [LN(0.3), LN(0.2)]], "not this generation's"),
    ],
)
def test_generation_rows_refuse_rows_that_do_not_line_up(top_ids, top_lps, message):
    with pytest.raises(ValueError, match=message):
        generation_rows(0, [5, 9], [LN(0.5), LN(0.1)], top_ids, top_lps)


def test_the_sampled_logprob_may_differ_within_the_validator_tolerance():
    rows = generation_rows(0, [5], [LN(0.5) + 5e-5], [[5, 3]], [[LN(0.5), LN(0.2)]])
    assert rows[0][1][0] == LN(0.5)


def test_block_positions_ascend_and_teacher_rows_line_up():
    rows = {7: ([1, 2], [LN(0.6), LN(0.3)]), 3: ([4, 5], [LN(0.8), LN(0.1)])}
    block = student_topk_block(2, rows, {7: [LN(0.5), None]})
    assert block["positions"] == [3, 7]
    assert block["ids"] == [[4, 5], [1, 2]]
    assert block["teacher_logprobs"] == [[], [LN(0.5), None]]
    assert block["teacher_unknown"] == 1
    assert "teacher_logprobs" not in student_topk_block(2, rows)
    with pytest.raises(ValueError, match="no student row"):
        student_topk_block(2, rows, {8: [LN(0.5), None]})
    with pytest.raises(ValueError, match="1 teacher logprobs for 2 student ids"):
        student_topk_block(2, rows, {7: [LN(0.5)]})


def _record_two_turns(tokenizer):
    """Two generated turns with hand-made top-2 rows (the sampled token first in each row)."""
    recorder = TranscriptRecorder(tokenizer, DEV_TOOLS)
    recorder.start([{"role": "user", "content": "Write add."}])
    made: dict[int, tuple[list[int], list[float]]] = {}
    for text in (" ls", "Done."):
        ids = tokenizer.encode(text, add_special_tokens=False) + [tokenizer.eos_token_id]
        top_ids = [[t, (t + 1) % 4096] for t in ids]
        top_lps = [[LN(0.6), LN(0.3)] for _ in ids]
        span = recorder.record_generation(
            ids, [LN(0.6)] * len(ids), {"role": "assistant", "content": text}, text, top_ids, top_lps
        )
        made.update({span.start + j: (top_ids[j], top_lps[j]) for j in range(len(ids))})
        if text == " ls":
            recorder.extend([{"role": "tool", "name": "terminal", "content": "solution.py"}])
    return recorder.trajectory(), made


def test_recorder_keeps_each_row_at_its_token_position(dev_tokenizer):
    traj, made = _record_two_turns(dev_tokenizer)
    generated = [i for i, m in enumerate(traj.masks) if m != MASKED]
    assert sorted(traj.student_topk) == generated == sorted(made)
    for pos, (ids, lps) in traj.student_topk.items():
        assert ids[0] == traj.tokens[pos]  # the row of the token that sits at that position
        assert (ids, lps) == made[pos]
    with pytest.raises(ValueError, match="that no turn generated"):
        Trajectory(
            tokens=[1, 2],
            masks=[MASKED, 2],
            inference_logprobs=[1.0, -0.1],
            turns=[TurnSpan(1, 2, 1)],
            student_topk={0: ([1], [-0.1])},
        )


def test_group_builder_writes_a_block_the_validator_accepts(dev_tokenizer):
    traj, _ = _record_two_turns(dev_tokenizer)
    opd = OPDConfig()
    plain = build_group([FinishedRollout(traj, 1.0, None)], include_messages=False, opd=opd)
    assert "student_topk" not in plain["overrides"][0]  # the knob is off by default
    group = build_group([FinishedRollout(traj, 1.0, None)], include_messages=False, opd=opd, student_topk_k=2)
    block = group["overrides"][0]["student_topk"]
    assert block["k"] == 2
    assert block["positions"] == [i for i, m in enumerate(group["masks"][0]) if m != MASKED]
    assert "teacher_logprobs" not in block  # no OPD ran: no teacher numbers at all
    assert validate_group(group) == []
    # With OPD: the teacher's numbers where it scored (the first turn), [] elsewhere.
    first = traj.turns[0]
    teacher = {p: [LN(0.5), None] for p in range(first.start, first.end)}
    ids_rows, lp_rows = empty_rows(len(traj.tokens))
    distill = SequenceDistill(ids_rows, lp_rows, {}, student_topk_teacher=teacher)
    with_opd = build_group(
        [FinishedRollout(traj, 1.0, distill)], include_messages=False, opd=opd, student_topk_k=2
    )
    block = with_opd["overrides"][0]["student_topk"]
    assert block["teacher_unknown"] == len(first)
    assert block["teacher_logprobs"] == [teacher.get(p, []) for p in block["positions"]]


def _exact(oracle: torch.Tensor, pos: int, ids: list[int]) -> list[float]:
    return [float(oracle[pos, i]) for i in ids]


def test_in_process_teacher_logprobs_on_student_ids_are_exact(dev_model_dir, reference_model):
    teacher = TransformersTeacher(str(dev_model_dir), 8, threads=1)
    prefix = list(range(40, 90))
    inputs = [(prefix + [7, 300, 12, 901, 5], 51), (prefix + [8, 300, 14], 51)]
    # Student ids far outside any top-8 (high ids of a random-ish model) and an empty row.
    extra = [[[4000, 3, 12], [17, 2048], [], [5]], [[300, 1, 4095], [14]]]
    rows, got = teacher.score_batch_on(inputs, extra)
    assert rows == teacher.score_batch(inputs)  # the rows themselves are unchanged
    shared_rows, shared = teacher.score_shared_prefix_on(inputs, extra)
    for b, (ids, prompt_len) in enumerate(inputs):
        oracle = full_logprobs(reference_model, ids)
        for j, want_ids in enumerate(extra[b]):
            want = _exact(oracle, prompt_len + j, want_ids)
            for values in (got[b][j], shared[b][j]):
                assert len(values) == len(want_ids)
                assert max((abs(x - y) for x, y in zip(values, want, strict=True)), default=0.0) <= 1e-5
    assert [len(r[0]) for r in shared_rows] == [4, 2]


async def test_in_process_score_turn_on_batches_with_plain_calls(dev_model_dir, reference_model):
    import asyncio

    teacher = TransformersTeacher(str(dev_model_dir), 4, threads=1)
    ids, prompt_len = list(range(100, 140)) + [9, 10], 40
    try:
        plain, (rows, exact) = await asyncio.gather(
            teacher.score_turn(ids, prompt_len), teacher.score_turn_on(ids, prompt_len, [[9, 11], [3000]])
        )
    finally:
        await teacher.close()
    assert plain == rows
    oracle = full_logprobs(reference_model, ids)
    assert exact[0] == pytest.approx(_exact(oracle, 40, [9, 11]), abs=1e-5)
    assert exact[1] == pytest.approx(_exact(oracle, 41, [3000]), abs=1e-5)
    with pytest.raises(ValueError, match="1 extra-id rows for a turn of 2 positions"):
        await teacher.score_turn_on(ids, prompt_len, [[9]])


def test_group_metrics_count_the_unknown_teacher_logprobs():
    from environments.pipeline.opd_metrics import group_metrics

    with_rows = SequenceDistill([], [], {}, student_topk_teacher={5: [LN(0.5), None], 6: [None, None]})
    metrics = group_metrics([with_rows, SequenceDistill([], [], {})])
    assert metrics["opd/student_topk_ids_scored"] == 4
    assert metrics["opd/student_topk_teacher_unknown_frac"] == 0.75
    assert "opd/student_topk_ids_scored" not in group_metrics([SequenceDistill([], [], {})])
