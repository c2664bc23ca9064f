"""Property tests of the losses over random and extreme inputs (hypothesis)."""

from __future__ import annotations

import math

import numpy as np
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trainer_adapters.losses import grpo_loss, log_tail_mass, opd_token_loss, opd_topk_loss, topk_kl
from trainer_adapters.student_logprobs import gather_logprobs

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Logit scales from gentle to extreme: a student that is near-uniform, peaked, or one-hot to
# float32 precision (logit gaps of 1e4 make every other probability exactly 0).
scales = st.sampled_from([0.01, 1.0, 10.0, 100.0, 1e4])


@st.composite
def topk_case(draw):
    seed = draw(st.integers(0, 2**31 - 1))
    B, T = draw(st.integers(1, 3)), draw(st.integers(1, 5))
    V = draw(st.integers(2, 50))
    K = draw(st.integers(1, V))  # K == V: the row covers the whole vocabulary (tail mass exactly 0)
    rng = np.random.default_rng(seed)
    student_logits = torch.tensor(rng.standard_normal((B, T, V)), dtype=torch.float32) * draw(scales)
    teacher_logits = torch.tensor(rng.standard_normal((B, T, V)), dtype=torch.float32) * draw(scales)
    ids = torch.stack([torch.tensor(rng.permutation(V)[:K]) for _ in range(B * T)]).view(B, T, K)
    teacher = torch.log_softmax(teacher_logits, -1).gather(-1, ids)
    valid = torch.tensor(rng.random((B, T, K)) < draw(st.sampled_from([0.0, 0.5, 1.0])))
    valid[..., 0] |= torch.tensor(rng.random((B, T)) < 0.7)  # most rows non-empty, some empty
    return student_logits, ids, teacher, valid


@SETTINGS
@given(case=topk_case(), direction=st.sampled_from(["reverse", "forward"]))
def test_topk_loss_is_finite_nonnegative_with_finite_gradients(case, direction):
    student_logits, ids, teacher, valid = case
    logits = student_logits.clone().requires_grad_(True)
    student = gather_logprobs(logits, ids)
    kl = topk_kl(student, teacher, valid, direction=direction)
    term = opd_topk_loss(student, teacher, valid, direction=direction)
    (grad,) = torch.autograd.grad(term.value, logits)
    assert torch.isfinite(kl).all() and torch.isfinite(term.value) and torch.isfinite(grad).all()
    assert kl.min().item() >= -1e-5
    assert (kl[~valid.any(-1)] == 0).all()
    for value in term.metrics.values():
        assert math.isfinite(float(value))


@SETTINGS
@given(case=topk_case())
def test_identical_distributions_have_zero_kl(case):
    student_logits, ids, _, valid = case
    student = gather_logprobs(student_logits, ids)
    for direction in ("reverse", "forward"):
        assert topk_kl(student, student, valid, direction=direction).abs().max().item() < 1e-4


@SETTINGS
@given(
    seed=st.integers(0, 2**31 - 1),
    k=st.integers(1, 8),
    mass=st.sampled_from([0.0, 1e-30, 1e-6, 0.5, 1 - 1e-6, 1 - 1e-9, 1.0]),
)
def test_tail_is_finite_and_at_most_zero(seed, k, mass):
    rng = np.random.default_rng(seed)
    probs = rng.dirichlet(np.ones(k)) * mass
    lps = torch.tensor(np.log(np.maximum(probs, 1e-45)), dtype=torch.float32).clamp(min=-1e4)
    lps = lps.view(1, k).requires_grad_(True)
    valid = torch.ones(1, k, dtype=torch.bool)
    tail = log_tail_mass(lps, valid)
    (grad,) = torch.autograd.grad(tail.sum(), lps)
    assert torch.isfinite(tail).all() and tail.item() <= 0.0 and torch.isfinite(grad).all()
    if 0.0 < mass < 0.99:
        assert tail.item() == pytest_approx(math.log1p(-probs.sum()))


def pytest_approx(value: float):
    import pytest

    return pytest.approx(value, rel=1e-4, abs=1e-6)


@SETTINGS
@given(
    seed=st.integers(0, 2**31 - 1),
    scale=scales,
    drift=st.sampled_from([0.0, 0.1, 5.0, 80.0]),
    clip=st.floats(0.01, 0.5),
)
def test_policy_losses_are_finite_for_extreme_logits_and_ratios(seed, scale, drift, clip):
    rng = np.random.default_rng(seed)
    B, T, V = 2, 6, 17
    logits = (torch.tensor(rng.standard_normal((B, T, V)), dtype=torch.float32) * scale).requires_grad_(True)
    targets = torch.tensor(rng.integers(0, V, (B, T)))
    lp = gather_logprobs(logits, targets[..., None])[..., 0]
    behaviour = (lp.detach() + torch.tensor(rng.normal(0, drift, (B, T)), dtype=torch.float32)).clamp(max=0.0)
    mask = torch.tensor(rng.random((B, T)) < 0.8)
    advantages = torch.tensor(rng.normal(0, 3, (B, T)), dtype=torch.float32)
    teacher = torch.tensor(-rng.exponential(3, (B, T)), dtype=torch.float32)
    for term in (
        grpo_loss(lp, behaviour, advantages, mask, clip_low=clip, clip_high=clip),
        opd_token_loss(lp, teacher, mask),
        opd_token_loss(lp, teacher, mask, behaviour_logprobs_BT=behaviour, clip_low=clip, clip_high=clip),
    ):
        (grad,) = torch.autograd.grad(term.value, logits, retain_graph=True)
        assert torch.isfinite(term.value) and torch.isfinite(grad).all()
        for value in term.metrics.values():
            assert math.isfinite(float(value))
        assert 0.0 <= float(term.metrics.get("grpo/clip_frac", 0.0)) <= 1.0
