"""Loss unit tests against hand-computed values (trainer_adapters/losses.py, student_logprobs.py)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from trainer_adapters.collate import collate_groups
from trainer_adapters.losses import (
    LOG_MASS_CAP,
    combine_terms,
    grpo_loss,
    log_tail_mass,
    opd_token_loss,
    opd_topk_loss,
    topk_kl,
)
from trainer_adapters.objective import compute_objective
from trainer_adapters.student_logprobs import StudentLogprobs, chunked_gather_logprobs, gather_logprobs
from trainer_adapters.trainer_config import LossConfig

LN = math.log


def _all_finite(*tensors: torch.Tensor) -> bool:
    return all(bool(torch.isfinite(t).all()) for t in tensors)


# --- tail bin ---------------------------------------------------------------------------------


def test_log_tail_mass_hand_value():
    lps = torch.tensor([[LN(0.2), LN(0.3), 0.0]])
    valid = torch.tensor([[True, True, False]])
    assert log_tail_mass(lps, valid).item() == pytest.approx(LN(0.5), abs=1e-6)


def test_tail_when_topk_mass_is_one_is_finite_with_finite_gradients():
    # The teacher's "top-K" is the whole vocabulary (mass exactly 1) and the student is nearly
    # one-hot inside it: both tails would be log(0) without the clamp.
    V = 5
    logits = torch.tensor([[[60.0, 0.0, -5.0, -8.0, -9.0]]], requires_grad=True)
    ids = torch.arange(V).view(1, 1, V)
    teacher = torch.log_softmax(torch.tensor([[[3.0, 2.0, 1.0, 0.0, -1.0]]]), dim=-1)
    valid = torch.ones(1, 1, V, dtype=torch.bool)
    for direction in ("reverse", "forward"):
        student = gather_logprobs(logits, ids)
        term = opd_topk_loss(student, teacher, valid, direction=direction)
        (grad,) = torch.autograd.grad(term.value, logits)
        assert _all_finite(term.value, grad), direction
        assert term.value.item() > 0
    tail = log_tail_mass(teacher.view(1, V), valid.view(1, V))
    assert tail.item() == pytest.approx(LN(-math.expm1(LOG_MASS_CAP)), rel=1e-3)  # floored at ~1e-7


def test_tail_when_topk_mass_is_zero_is_log_one():
    # Student and teacher put almost nothing on the row's ids: the tail holds everything.
    logits = torch.tensor([[[-90.0, -95.0, 10.0, 12.0]]], requires_grad=True)
    ids = torch.tensor([[[0, 1]]])
    teacher = torch.tensor([[[-80.0, -85.0]]])
    valid = torch.ones(1, 1, 2, dtype=torch.bool)
    assert log_tail_mass(teacher.view(1, 2), valid.view(1, 2)).item() == pytest.approx(0.0, abs=1e-12)
    for direction in ("reverse", "forward"):
        term = opd_topk_loss(gather_logprobs(logits, ids), teacher, valid, direction=direction)
        (grad,) = torch.autograd.grad(term.value, logits)
        assert _all_finite(term.value, grad)
        assert term.value.item() == pytest.approx(0.0, abs=1e-6)


# --- KL direction -----------------------------------------------------------------------------


def test_topk_kl_hand_values_both_directions():
    # student bins [0.7, 0.2] + tail 0.1; teacher bins [0.4, 0.4] + tail 0.2
    student = torch.tensor([[LN(0.7), LN(0.2)]])
    teacher = torch.tensor([[LN(0.4), LN(0.4)]])
    valid = torch.ones(1, 2, dtype=torch.bool)
    reverse = 0.7 * LN(0.7 / 0.4) + 0.2 * LN(0.2 / 0.4) + 0.1 * LN(0.1 / 0.2)
    forward = 0.4 * LN(0.4 / 0.7) + 0.4 * LN(0.4 / 0.2) + 0.2 * LN(0.2 / 0.1)
    assert topk_kl(student, teacher, valid, direction="reverse").item() == pytest.approx(reverse, abs=1e-6)
    assert topk_kl(student, teacher, valid, direction="forward").item() == pytest.approx(forward, abs=1e-6)
    assert reverse == pytest.approx(0.18378, abs=1e-4) and forward == pytest.approx(0.19204, abs=1e-4)


def test_reverse_kl_matches_kl_div_semantics():
    # F.kl_div(input=log q, target=log p, log_target=True) = sum p (log p - log q) = KL(p || q).
    # Reverse KL(student || teacher) is therefore kl_div(input=teacher, target=student).
    torch.manual_seed(0)
    V, K = 12, 4
    student_logits = torch.randn(1, 1, V)
    teacher_full = torch.log_softmax(torch.randn(V) * 2, dim=-1)
    top = teacher_full.topk(K)
    ids = top.indices.view(1, 1, K)
    student = gather_logprobs(student_logits, ids)
    valid = torch.ones(1, 1, K, dtype=torch.bool)

    def bins(lp: torch.Tensor) -> torch.Tensor:
        return torch.cat([lp, torch.log1p(-lp.exp().sum(-1, keepdim=True))], dim=-1)

    s_bins, t_bins = bins(student.view(1, K)), bins(top.values.view(1, K))
    expected_reverse = F.kl_div(t_bins, s_bins, log_target=True, reduction="sum")
    expected_forward = F.kl_div(s_bins, t_bins, log_target=True, reduction="sum")
    got_reverse = topk_kl(student, top.values.view(1, 1, K), valid, direction="reverse")
    got_forward = topk_kl(student, top.values.view(1, 1, K), valid, direction="forward")
    assert got_reverse.item() == pytest.approx(expected_reverse.item(), abs=1e-5)
    assert got_forward.item() == pytest.approx(expected_forward.item(), abs=1e-5)
    assert abs(expected_reverse.item() - expected_forward.item()) > 1e-3  # the directions differ here


def test_reverse_kl_gradient_matches_autograd_of_explicit_formula():
    torch.manual_seed(1)
    V, K = 10, 3
    logits = torch.randn(1, 1, V, requires_grad=True)
    ids = torch.tensor([[[2, 5, 7]]])
    teacher = torch.log_softmax(torch.randn(V), -1)[ids.view(-1)].view(1, 1, K)
    valid = torch.ones(1, 1, K, dtype=torch.bool)
    (got,) = torch.autograd.grad(opd_topk_loss(gather_logprobs(logits, ids), teacher, valid).value, logits)
    logits2 = logits.detach().clone().requires_grad_(True)
    p = torch.softmax(logits2.view(V), -1)[ids.view(-1)]
    p_bins = torch.cat([p, 1 - p.sum(0, keepdim=True)])
    q = teacher.view(K).exp()
    q_bins = torch.cat([q, 1 - q.sum(0, keepdim=True)])
    explicit = (p_bins * (p_bins.log() - q_bins.log())).sum()
    (want,) = torch.autograd.grad(explicit, logits2)
    torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-4)


# --- masking ----------------------------------------------------------------------------------


def test_empty_rows_and_padding_entries_are_masked():
    torch.manual_seed(2)
    V = 8
    logits = torch.randn(1, 3, V, requires_grad=True)
    ids = torch.tensor([[[1, 2, 0], [3, 0, 0], [0, 0, 0]]])  # ragged row, short row, empty row
    valid = torch.tensor([[[True, True, False], [True, False, False], [False, False, False]]])
    teacher = torch.tensor([[[-0.5, -1.5, 0.0], [-0.1, 0.0, 0.0], [0.0, 0.0, 0.0]]])
    student = gather_logprobs(logits, ids)
    term = opd_topk_loss(student, teacher, valid)
    per_position = topk_kl(student, teacher, valid)
    assert per_position[0, 2].item() == 0.0
    expected = (
        topk_kl(student[:, 0, :2], teacher[:, 0, :2], valid[:, 0, :2])
        + topk_kl(student[:, 1, :1], teacher[:, 1, :1], valid[:, 1, :1])
    ) / 2  # mean over the two positions that have rows
    assert term.value.item() == pytest.approx(expected.item(), abs=1e-6)
    (grad,) = torch.autograd.grad(term.value, logits)
    assert torch.count_nonzero(grad[0, 2]) == 0  # the empty row's logits get no gradient
    # Whatever sits in invalid entries (here: the student's logprob of pad id 0) is ignored.
    changed = student.detach().clone()
    changed[~valid] = -3.0
    assert opd_topk_loss(changed, teacher + (~valid) * -7.0, valid).value.item() == pytest.approx(
        term.value.item(), abs=1e-6
    )


def test_no_teacher_rows_gives_zero_opd_with_a_graph():
    logits = torch.randn(1, 2, 5, requires_grad=True)
    ids = torch.zeros(1, 2, 1, dtype=torch.long)
    valid = torch.zeros(1, 2, 1, dtype=torch.bool)
    term = opd_topk_loss(gather_logprobs(logits, ids), torch.zeros(1, 2, 1), valid)
    assert term.value.item() == 0.0
    (grad,) = torch.autograd.grad(term.value, logits)
    assert torch.count_nonzero(grad) == 0


# --- GRPO -------------------------------------------------------------------------------------


def test_grpo_clipping_hand_values():
    old = torch.zeros(1, 4)
    lp = torch.log(torch.tensor([[1.5, 0.5, 0.5, 1.5]])).requires_grad_(True)
    adv = torch.tensor([[1.0, 1.0, -1.0, -1.0]])
    mask = torch.ones(1, 4, dtype=torch.bool)
    term = grpo_loss(lp, old, adv, mask, clip_low=0.2, clip_high=0.2)
    # objectives: min(1.5, 1.2)=1.2 (clipped), min(0.5, 0.8)=0.5, min(-0.5, -0.8)=-0.8 (clipped),
    # min(-1.5, -1.2)=-1.5; loss = -mean
    assert term.value.item() == pytest.approx(-(1.2 + 0.5 - 0.8 - 1.5) / 4, abs=1e-6)
    assert term.metrics["grpo/clip_frac"].item() == pytest.approx(0.5)
    (grad,) = torch.autograd.grad(term.value, lp)
    # d(-r A / 4)/d lp = -r A / 4 where unclipped, 0 where clipped
    torch.testing.assert_close(grad, torch.tensor([[0.0, -0.5 / 4, 0.0, 1.5 / 4]]))


def test_grpo_ignores_masked_positions_and_uses_given_denominator():
    lp = torch.tensor([[-1.0, -2.0, -50.0]], requires_grad=True)
    old = torch.tensor([[-1.0, -2.0, 0.0]])  # a masked position with a huge log ratio
    adv = torch.tensor([[2.0, 2.0, 2.0]])
    mask = torch.tensor([[True, True, False]])
    term = grpo_loss(lp, old, adv, mask, num_tokens=4)
    assert term.value.item() == pytest.approx(-(2.0 + 2.0) / 4)
    (grad,) = torch.autograd.grad(term.value, lp)
    torch.testing.assert_close(grad, torch.tensor([[-0.5, -0.5, 0.0]]))


def test_grpo_caps_absurd_log_ratios():
    # A sampler logprob 30 nats below the current one (stale data, tokenizer mismatch): exp(30)
    # times a negative advantage would dominate the batch; such a token is left out entirely.
    lp = torch.tensor([[-0.1, -1.0]], requires_grad=True)
    old = torch.tensor([[-30.1, -1.0]])
    adv = torch.tensor([[-1.0, -1.0]])
    mask = torch.ones(1, 2, dtype=torch.bool)
    term = grpo_loss(lp, old, adv, mask)
    assert term.value.item() == pytest.approx(0.5)  # only the sane token: -(1 * -1) / 2
    (grad,) = torch.autograd.grad(term.value, lp)
    torch.testing.assert_close(grad, torch.tensor([[0.0, 0.5]]))
    assert term.metrics["grpo/ratio_capped_frac"].item() == pytest.approx(0.5)


# --- token-level OPD --------------------------------------------------------------------------


def test_opd_token_advantage_is_clipped_and_detached():
    lp = torch.tensor([[-1.0, -2.0, -0.5, -9.0]], requires_grad=True)
    teacher = torch.tensor([[-0.5, -12.0, -0.5, 0.0]])
    mask = torch.tensor([[True, True, True, False]])
    term = opd_token_loss(lp, teacher, mask, advantage_clip=5.0)
    # A = [0.5, clip(-10)=-5, 0.0, masked]; grad of -sum(A*lp)/3 is -A/3
    (grad,) = torch.autograd.grad(term.value, lp)
    torch.testing.assert_close(grad, torch.tensor([[-0.5 / 3, 5.0 / 3, 0.0, 0.0]]))
    assert term.metrics["opd/token_advantage"].item() == pytest.approx((0.5 - 5.0) / 3)
    assert term.metrics["opd/token_logprob_gap"].item() == pytest.approx((0.5 - 10.0) / 3)
    assert term.metrics["opd/token_advantage_clip_frac"].item() == pytest.approx(1 / 3)


def test_opd_token_kl_k3_is_zero_on_the_teacher_and_exact_elsewhere():
    mask = torch.tensor([[True, True, False]])
    same = opd_token_loss(torch.tensor([[-1.0, -2.0, -3.0]]), torch.tensor([[-1.0, -2.0, 0.0]]), mask)
    assert same.metrics["opd/token_kl_k3"].item() == 0.0
    # gap d = teacher - student = [1, -1]: k3 = exp(d) - 1 - d = [e - 2, 1/e], masked third position
    term = opd_token_loss(torch.tensor([[-2.0, -1.0, -3.0]]), torch.tensor([[-1.0, -2.0, 0.0]]), mask)
    assert term.metrics["opd/token_kl_k3"].item() == pytest.approx((math.e - 2 + 1 / math.e) / 2)


def test_opd_token_half_sq_gap_is_the_objective_the_surrogate_descends():
    lp = torch.tensor([[-2.0, -1.0, -3.0]], requires_grad=True)
    teacher = torch.tensor([[-1.0, -4.0, 0.0]])
    mask = torch.tensor([[True, True, False]])
    term = opd_token_loss(lp, teacher, mask)
    # gap d = [1, -3]: mean d^2 / 2 over the two teacher positions
    assert term.metrics["opd/token_half_sq_gap"].item() == pytest.approx((1 + 9) / 2 / 2)
    # inside the clip, the surrogate's gradient is that of the logged objective
    objective = ((teacher - lp).square() / 2 * mask).sum() / 2
    (surrogate_grad,) = torch.autograd.grad(term.value, lp)
    (objective_grad,) = torch.autograd.grad(objective, lp)
    torch.testing.assert_close(surrogate_grad, objective_grad)


def test_opd_token_ppo_variant_clips_the_ratio():
    behaviour = torch.log(torch.tensor([[0.4, 0.4]]))
    lp = torch.log(torch.tensor([[0.6, 0.6]])).requires_grad_(True)  # ratio 1.5 at both
    teacher = torch.log(torch.tensor([[0.3, 0.9]]))  # A = [log 0.5, log 1.5]
    mask = torch.ones(1, 2, dtype=torch.bool)
    term = opd_token_loss(lp, teacher, mask, behaviour_logprobs_BT=behaviour, clip_low=0.2, clip_high=0.2)
    a0, a1 = LN(0.5), LN(1.5)
    # A0 < 0: min(1.5 A0, 1.2 A0) = 1.5 A0 (unclipped); A1 > 0: min(1.5 A1, 1.2 A1) = 1.2 A1 (clipped)
    assert term.value.item() == pytest.approx(-(1.5 * a0 + 1.2 * a1) / 2, abs=1e-6)
    assert term.metrics["opd/token_ratio_clip_frac"].item() == pytest.approx(0.5)
    (grad,) = torch.autograd.grad(term.value, lp)
    torch.testing.assert_close(grad, torch.tensor([[-1.5 * a0 / 2, 0.0]]))


# --- combination and independence -------------------------------------------------------------


def _group(scores: list[float]) -> dict:
    tokens = [[1, 2, 3, 4, 5], [1, 2, 6, 7, 8]]
    masks = [[-100, -100, 3, 4, 5], [-100, -100, 6, 7, 8]]
    rows_ids = [[[], [], [3, 9], [4], []], [[], [], [6], [1, 7, 2], [8]]]
    rows_lps = [[[], [], [-0.2, -2.0], [-0.1], []], [[], [], [-0.3], [-0.9, -1.2, -2.2], [-0.05]]]
    return {
        "tokens": tokens,
        "masks": masks,
        "scores": scores,
        "inference_logprobs": [[1.0, 1.0, -1.1, -0.7, -2.0], [1.0, 1.0, -0.4, -1.6, -0.3]],
        "distill_token_ids": rows_ids,
        "distill_logprobs": rows_lps,
    }


def _objective_grad(batch, logits: torch.Tensor, config: LossConfig):
    logits = logits.detach().clone().requires_grad_(True)
    gathered = gather_logprobs(
        logits, torch.cat([batch.target_ids_BT[..., None], batch.teacher_topk_ids_BTK], dim=-1)
    )
    student = StudentLogprobs(gathered[..., 0], gathered[..., 1:])
    out = compute_objective(student, batch, config)
    (grad,) = torch.autograd.grad(out.total, logits, allow_unused=True)
    return out, grad


@pytest.mark.parametrize("opd_mode", ["topk", "token"])
def test_weights_are_independent(opd_mode):
    batch = collate_groups([_group([1.0, 0.0])])
    logits = torch.randn(2, 4, 12, generator=torch.Generator().manual_seed(3))
    advantages_before = batch.advantages_BT.clone()
    both, grad_both = _objective_grad(batch, logits, LossConfig(opd_mode=opd_mode, w_grpo=1.0, w_opd=1.0))
    grpo_only, grad_grpo = _objective_grad(
        batch, logits, LossConfig(opd_mode=opd_mode, w_grpo=1.0, w_opd=0.0)
    )
    opd_only, grad_opd = _objective_grad(batch, logits, LossConfig(opd_mode=opd_mode, w_grpo=0.0, w_opd=1.0))
    # Each term is computed and logged even when its weight is 0.
    assert grpo_only.terms["opd"].item() == pytest.approx(both.terms["opd"].item())
    assert opd_only.terms["grpo"].item() == pytest.approx(both.terms["grpo"].item())
    assert grpo_only.total.item() == pytest.approx(both.terms["grpo"].item())
    assert opd_only.total.item() == pytest.approx(both.terms["opd"].item())
    # w_opd = 0 is exactly the GRPO gradient, and the other way round.
    alone = logits.clone().requires_grad_(True)
    lp = gather_logprobs(alone, batch.target_ids_BT[..., None])[..., 0]
    grpo = grpo_loss(lp, batch.behaviour_logprobs(lp), batch.advantages_BT, batch.loss_mask_BT)
    (grad_grpo_alone,) = torch.autograd.grad(grpo.value, alone)
    assert torch.equal(grad_grpo, grad_grpo_alone)
    torch.testing.assert_close(grad_both, grad_grpo + grad_opd)
    assert torch.count_nonzero(grad_opd) > 0
    assert torch.equal(batch.advantages_BT, advantages_before)  # OPD never touches advantages


def test_equal_score_group_trains_opd_only():
    batch = collate_groups([_group([0.5, 0.5])])
    assert torch.count_nonzero(batch.advantages_BT) == 0
    logits = torch.randn(2, 4, 12, generator=torch.Generator().manual_seed(4))
    out, grad = _objective_grad(batch, logits, LossConfig(w_grpo=1.0, w_opd=1.0))
    _, grad_opd = _objective_grad(batch, logits, LossConfig(w_grpo=0.0, w_opd=1.0))
    assert out.terms["grpo"].item() == 0.0
    assert out.terms["opd"].item() > 0.0
    torch.testing.assert_close(grad, grad_opd)


@pytest.mark.parametrize("opd_mode", ["topk", "token"])
def test_the_sign_flip_control_negates_only_the_opd_gradient(opd_mode):
    batch = collate_groups([_group([1.0, 0.0])])
    logits = torch.randn(2, 4, 12, generator=torch.Generator().manual_seed(8))
    kept, grad_kept = _objective_grad(batch, logits, LossConfig(opd_mode=opd_mode, w_grpo=1.0))
    flipped, grad_flipped = _objective_grad(
        batch, logits, LossConfig(opd_mode=opd_mode, w_grpo=1.0, opd_sign=-1)
    )
    _, grad_grpo = _objective_grad(batch, logits, LossConfig(opd_mode=opd_mode, w_grpo=1.0, w_opd=0.0))
    assert flipped.terms["opd"].item() == pytest.approx(kept.terms["opd"].item())  # logged as it is
    torch.testing.assert_close(grad_flipped - grad_grpo, -(grad_kept - grad_grpo))
    assert torch.count_nonzero(grad_kept - grad_grpo) > 0
    with pytest.raises(ValueError):
        LossConfig(opd_sign=0)


def test_combine_terms_weights_and_logs_each_term():
    a = torch.tensor(2.0, requires_grad=True)
    b = torch.tensor(3.0, requires_grad=True)
    from trainer_adapters.losses import LossTerm

    out = combine_terms({"grpo": (0.5, LossTerm(a * 1.0)), "opd": (2.0, LossTerm(b * 1.0))})
    assert out.total.item() == pytest.approx(0.5 * 2 + 2 * 3)
    assert out.metrics["loss/grpo"].item() == 2.0 and out.metrics["loss/opd"].item() == 3.0
    out.total.backward()
    assert a.grad.item() == 0.5 and b.grad.item() == 2.0
    none = combine_terms({"grpo": (0.0, LossTerm(a * 1.0)), "opd": (1.0, None)})
    assert none.total.item() == 0.0 and not none.total.requires_grad


# --- logprob gathering and temperature --------------------------------------------------------


def test_gather_logprobs_is_temperature_one_by_default():
    logits = torch.randn(2, 3, 7, generator=torch.Generator().manual_seed(5))
    ids = torch.randint(0, 7, (2, 3, 2), generator=torch.Generator().manual_seed(6))
    torch.testing.assert_close(gather_logprobs(logits, ids), torch.log_softmax(logits, -1).gather(-1, ids))
    torch.testing.assert_close(
        gather_logprobs(logits, ids, temperature=0.5), torch.log_softmax(logits * 2, -1).gather(-1, ids)
    )
    assert LossConfig().student_temperature == 1.0


def test_chunked_gather_matches_full_values_and_gradients():
    torch.manual_seed(7)
    head = torch.nn.Linear(6, 11, bias=False)
    hidden = torch.randn(2, 9, 6, requires_grad=True)
    ids = torch.randint(0, 11, (2, 9, 3))
    full = gather_logprobs(head(hidden), ids, temperature=0.7)
    (g_full,) = torch.autograd.grad(full.sum(), hidden)
    chunked = chunked_gather_logprobs(hidden, head, ids, temperature=0.7, chunk_size=4)
    (g_chunked,) = torch.autograd.grad(chunked.sum(), hidden)
    torch.testing.assert_close(chunked, full)
    torch.testing.assert_close(g_chunked, g_full)
