"""OPD loss variants against hand computations to 1e-6 (trainer_adapters/opd_variants.py, losses.py,
opd_entries.py, objective.py): the vocabulary subset, the gap clip and the PPO-clipped OPD term."""

from __future__ import annotations

import math

import pytest
import torch

from hermes_opd.contract.student_topk import make_student_topk_block
from hermes_opd.contract.validation import validate_group
from trainer_adapters.collate import collate_groups
from trainer_adapters.losses import opd_topk_loss
from trainer_adapters.objective import compute_objective, opd_entry_ids
from trainer_adapters.opd_entries import opd_entries
from trainer_adapters.opd_variants import opd_subset_ppo_loss, vocab_subset_mask
from trainer_adapters.student_logprobs import StudentLogprobs, gather_logprobs
from trainer_adapters.trainer_config import LossConfig

LN = math.log


def _lp(*probs: float) -> torch.Tensor:
    return torch.tensor([[LN(p) for p in probs]], dtype=torch.float32)


def test_vocab_subset_masks_by_hand():
    in_teacher = torch.tensor([[True, True, True, False, False]])
    in_student = torch.tensor([[True, False, True, True, True]])
    known = torch.tensor([[True, True, True, True, False]])  # the last student id: teacher logprob unknown
    expect = {
        "teacher_topk": [True, True, True, False, False],
        "student_topk": [True, False, True, True, False],
        "overlap": [True, False, True, False, False],
        "union": [True, True, True, True, False],
    }
    for vocab, want in expect.items():
        assert vocab_subset_mask(in_teacher, in_student, known, vocab).tolist() == [want], vocab
    with pytest.raises(ValueError, match="unknown OPD vocabulary 'student'"):
        vocab_subset_mask(in_teacher, in_student, known, "student")


def test_subset_kl_keeps_one_tail_bin_by_hand():
    student, teacher = _lp(0.5, 0.2, 0.1), _lp(0.3, 0.4, 0.05)
    subset = torch.tensor([[True, True, False]])  # the third id falls into the tail
    term = opd_topk_loss(student, teacher, subset)
    # bins {0, 1} + tail: student tail 0.3, teacher tail 0.3
    hand = 0.5 * LN(0.5 / 0.3) + 0.2 * LN(0.2 / 0.4) + 0.3 * LN(0.3 / 0.3)
    assert term.value.item() == pytest.approx(hand, abs=1e-6)
    assert term.metrics["opd/reverse_kl"].item() == pytest.approx(hand, abs=1e-6)
    assert term.metrics["opd/subset_size"].item() == 2.0
    assert term.metrics["opd/diff_clip_frac"].item() == 0.0


def test_diff_clip_in_topk_mode_by_hand_and_logged():
    student, teacher = _lp(0.5, 0.2), _lp(0.3, 0.4)
    subset = torch.tensor([[True, True]])
    c = 0.5
    term = opd_topk_loss(student, teacher, subset, diff_clip=c)
    # gaps log q - log p: ln(0.6) = -0.51 -> -0.5, ln(2) = 0.69 -> +0.5, tail ln(0.3/0.3) = 0 (unclipped)
    q0, q1 = 0.5 * math.exp(-c), 0.2 * math.exp(c)
    generalized = (0.5 * c - 0.5 + q0) + (0.2 * -c - 0.2 + q1) + 0.0
    assert term.value.item() == pytest.approx(generalized, abs=1e-6)
    unclipped = 0.5 * LN(0.5 / 0.3) + 0.2 * LN(0.2 / 0.4)
    assert term.metrics["opd/reverse_kl"].item() == pytest.approx(unclipped, abs=1e-6)  # logged unclipped
    assert term.metrics["opd/clipped_objective"].item() == pytest.approx(generalized, abs=1e-6)
    assert term.metrics["opd/diff_clip_frac"].item() == pytest.approx(1.0)
    # The gradient wrt each student logprob is p (log p - log q~): the clipped gap, never the raw one.
    lps = student.clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(opd_topk_loss(lps, teacher, subset, diff_clip=c).value, lps)
    assert grad[0, 0].item() == pytest.approx(0.5 * c, abs=1e-6)  # the tail's gap is 0: no share
    assert grad[0, 1].item() == pytest.approx(0.2 * -c, abs=1e-6)


def test_subset_ppo_term_by_hand():
    old = _lp(0.5, 0.2, 0.3)
    current = _lp(0.6, 0.1, 0.3).requires_grad_(True)
    teacher = _lp(0.3, 0.1, 0.9)
    subset = torch.tensor([[True, True, False]])
    term = opd_subset_ppo_loss(current, old, teacher, subset, clip_low=0.2, clip_high=0.28)
    a0, a1 = LN(0.3 / 0.5), LN(0.1 / 0.2)  # both < 0
    # r0 = 1.2 inside [0.8, 1.28]: 1.2 a0; r1 = 0.5: min(0.5 a1, 0.8 a1) = 0.8 a1 (clipped)
    hand = -(0.5 * 1.2 * a0 + 0.2 * 0.8 * a1)
    assert term.value.item() == pytest.approx(hand, abs=1e-6)
    assert term.metrics["opd/ppo_ratio_clip_frac"].item() == pytest.approx(0.5)
    assert term.metrics["opd/subset_old_mass"].item() == pytest.approx(0.7, abs=1e-6)
    (grad,) = torch.autograd.grad(term.value, current)
    torch.testing.assert_close(grad, torch.tensor([[-0.5 * 1.2 * a0, 0.0, 0.0]]))


def test_subset_ppo_gap_clip_by_hand():
    old = _lp(0.5, 0.2)
    teacher = _lp(0.01, 0.9)
    subset = torch.tensor([[True, True]])
    term = opd_subset_ppo_loss(old.clone(), old, teacher, subset, diff_clip=1.0)
    # gaps ln(0.02) = -3.9 -> -1, ln(4.5) = 1.5 -> +1; ratio 1
    assert term.value.item() == pytest.approx(-(0.5 * -1.0 + 0.2 * 1.0), abs=1e-6)
    assert term.metrics["opd/diff_clip_frac"].item() == pytest.approx(1.0)
    free = opd_subset_ppo_loss(old.clone(), old, teacher, subset)
    assert free.value.item() == pytest.approx(-(0.5 * LN(0.02) + 0.2 * LN(4.5)), abs=1e-6)
    with pytest.raises(ValueError, match="opd_diff_clip must be > 0"):
        opd_subset_ppo_loss(old, old, teacher, subset, diff_clip=0.0)


# --- through the collated batch: the student's own top-K rows ---------------------------------


def _group_with_student_topk() -> dict:
    # One sequence, positions 2 and 3 generated; the teacher scored both.
    tokens = [1, 2, 3, 4]
    inference = [0.0, 0.0, LN(0.5), LN(0.4)]
    block = make_student_topk_block(
        2,
        [2, 3],
        [[3, 7], [4, 8]],
        [[LN(0.5), LN(0.3)], [LN(0.4), LN(0.35)]],
        # id 7 is in the teacher row; id 8 is not, and the teacher path did not return it (unknown)
        teacher_logprobs=[[LN(0.6), LN(0.2)], [LN(0.1), None]],
    )
    return {
        "tokens": [tokens],
        "masks": [[-100, -100, 3, 4]],
        "scores": [1.0],
        "inference_logprobs": [inference],
        "distill_token_ids": [[[], [], [3, 7, 9], [5, 4]]],
        "distill_logprobs": [[[], [], [LN(0.6), LN(0.2), LN(0.1)], [LN(0.7), LN(0.1)]]],
        "overrides": [{"student_topk": block}],
    }


def test_student_topk_block_passes_the_validator_and_bad_ones_do_not():
    group = _group_with_student_topk()
    assert validate_group(group, require_provenance=False) == []
    bad = _group_with_student_topk()
    bad["overrides"][0]["student_topk"]["logprobs"][0] = [LN(0.3), LN(0.5)]  # not best first
    bad["overrides"][0]["student_topk"]["positions"] = [1, 3]  # position 1 was not generated
    kinds = [(v.kind, v.pos) for v in validate_group(bad, require_provenance=False)]
    assert ("student_topk", 1) in kinds
    wrong = _group_with_student_topk()
    wrong["overrides"][0]["student_topk"]["logprobs"][1] = [LN(0.3), LN(0.2)]  # token 4: 0.3 != 0.4
    messages = [v.message for v in validate_group(wrong, require_provenance=False)]
    assert any("has logprob" in m and "inference_logprobs" in m for m in messages)
    count = _group_with_student_topk()
    count["overrides"][0]["student_topk"]["teacher_unknown"] = 0
    assert any("teacher_unknown" in v.message for v in validate_group(count, require_provenance=False))


def test_entries_add_student_ids_and_leave_unknown_ones_out():
    batch = collate_groups([_group_with_student_topk()])
    entries = opd_entries(batch)
    # target j = pos - 1: j=1 is position 2 (teacher row [3, 7, 9]), j=2 is position 3 (row [5, 4])
    assert batch.student_topk_ids_BTS[0, 1].tolist() == [3, 7]
    assert entries.ids_BTE.shape == (1, 3, 5)  # K = 3 teacher columns + S = 2 student columns
    assert entries.ids_BTE[0, 2].tolist() == [5, 4, 0, 0, 8]
    assert entries.in_student_BTE[0, 1].tolist() == [True, True, False, False, False]
    assert entries.in_student_BTE[0, 2].tolist() == [False, True, False, False, True]
    assert entries.known_BTE[0, 2].tolist() == [True, True, False, False, False]  # id 8 unknown: out
    assert (entries.student_unknown, entries.student_total) == (1, 1)


@pytest.mark.parametrize("vocab", ["student_topk", "overlap", "union", "teacher_topk"])
def test_objective_runs_each_subset_by_hand(vocab):
    batch = collate_groups([_group_with_student_topk()])
    logits = torch.randn(1, 3, 12, generator=torch.Generator().manual_seed(0))
    config = LossConfig(opd_mode="topk", opd_vocab=vocab, w_grpo=0.0)
    ids = opd_entry_ids(batch, config)
    gathered = gather_logprobs(logits, torch.cat([batch.target_ids_BT[..., None], ids], dim=-1))
    out = compute_objective(StudentLogprobs(gathered[..., 0], gathered[..., 1:]), batch, config)
    s = torch.log_softmax(logits, -1)[0]
    sets = {  # target j -> {id: teacher logprob} of the subset
        "student_topk": {1: {3: LN(0.6), 7: LN(0.2)}, 2: {4: LN(0.1)}},
        "overlap": {1: {3: LN(0.6), 7: LN(0.2)}, 2: {4: LN(0.1)}},
        "union": {1: {3: LN(0.6), 7: LN(0.2), 9: LN(0.1)}, 2: {5: LN(0.7), 4: LN(0.1)}},
        "teacher_topk": {1: {3: LN(0.6), 7: LN(0.2), 9: LN(0.1)}, 2: {5: LN(0.7), 4: LN(0.1)}},
    }[vocab]
    total = 0.0
    for j, row in sets.items():
        p = {i: math.exp(s[j, i].item()) for i in row}
        q = {i: math.exp(v) for i, v in row.items()}
        tail_p, tail_q = 1 - sum(p.values()), 1 - sum(q.values())
        total += sum(p[i] * LN(p[i] / q[i]) for i in row) + tail_p * LN(tail_p / tail_q)
    assert out.terms["opd"].item() == pytest.approx(total / 2, abs=1e-6)
    # The subset is visible in the logged terms (what both trainers log): entries per position.
    sizes = [len(row) for row in sets.values()]
    assert out.metrics["opd/subset_size"].item() == pytest.approx(sum(sizes) / 2)
    clipped = compute_objective(
        StudentLogprobs(gathered[..., 0], gathered[..., 1:]),
        batch,
        config.model_copy(update={"opd_diff_clip": 1e-3}),
    )
    assert clipped.metrics["opd/diff_clip_frac"].item() == pytest.approx(1.0)  # every gap exceeds 0.001
    assert clipped.metrics["opd/reverse_kl"].item() == pytest.approx(total / 2, abs=1e-6)
    assert clipped.terms["opd"].item() < out.terms["opd"].item()
    # one student id outside the rows (id 8, unknown) over 2 teacher positions
    assert out.metrics["opd/student_topk_extra"].item() == pytest.approx(0.5)
    assert out.metrics["opd/student_topk_unknown"].item() == pytest.approx(0.5)


def test_token_mode_diff_clip_replaces_the_advantage_clip():
    batch = collate_groups([_group_with_student_topk()])
    token = torch.tensor([[0.0, LN(0.01), LN(0.9)]])  # gaps: ln(0.6/0.01) = 4.09, ln(0.1/0.9) = -2.2
    out = compute_objective(
        StudentLogprobs(token, None), batch, LossConfig(opd_mode="token", opd_diff_clip=1.0)
    )
    assert out.metrics["opd/token_advantage"].item() == pytest.approx((1.0 - 1.0) / 2, abs=1e-6)
    assert out.metrics["opd/token_advantage_clip_frac"].item() == pytest.approx(1.0)
    default = compute_objective(StudentLogprobs(token, None), batch, LossConfig(opd_mode="token"))
    assert default.metrics["opd/token_advantage"].item() == pytest.approx(
        (LN(0.6 / 0.01) + LN(0.1 / 0.9)) / 2, abs=1e-5
    )


def test_config_refuses_a_subset_in_token_mode_and_a_subset_without_rows():
    with pytest.raises(ValueError, match="needs opd_mode 'topk' or 'subset_ppo'"):
        LossConfig(opd_mode="token", opd_vocab="overlap")
    group = _group_with_student_topk()
    group["overrides"] = [{}]
    batch = collate_groups([group])
    config = LossConfig(opd_vocab="student_topk")
    ids = opd_entry_ids(batch, config)
    gathered = gather_logprobs(torch.zeros(1, 3, 12), torch.cat([batch.target_ids_BT[..., None], ids], -1))
    with pytest.raises(ValueError, match="needs the sampler's own top-K rows"):
        compute_objective(StudentLogprobs(gathered[..., 0], gathered[..., 1:]), batch, config)


def test_tinker_adapter_sends_the_same_entries_and_gets_the_same_loss():
    from trainer_adapters.tinker_objective import build_objective_step

    config = LossConfig(opd_mode="subset_ppo", opd_vocab="union", opd_diff_clip=1.0)
    step = build_objective_step([_group_with_student_topk()], config)
    (datum,) = step.datums
    targets = datum.loss_fn_inputs["target_tokens"].to_numpy()
    assert targets.shape == (3, 1 + 5) and targets[2].tolist() == [4, 5, 4, 0, 0, 0]  # id 8 unknown: not sent
    logits = torch.randn(1, 3, 12, generator=torch.Generator().manual_seed(1))
    ids = opd_entry_ids(step.batch, config)
    gathered = gather_logprobs(logits, torch.cat([step.batch.target_ids_BT[..., None], ids], dim=-1))
    torch_side = compute_objective(StudentLogprobs(gathered[..., 0], gathered[..., 1:]), step.batch, config)
    service = gather_logprobs(logits, torch.from_numpy(targets)[None])[0]
    tinker_side = step.loss_fn.breakdown([service])
    assert tinker_side.terms["opd"].item() == pytest.approx(torch_side.terms["opd"].item(), abs=1e-6)
    assert tinker_side.terms["opd"].item() != 0.0
