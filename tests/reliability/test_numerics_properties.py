"""Numerics properties not covered by tests/unit/test_distill_format.py and tests/unit/test_loss_properties.py:

- unpacking: every single corruption of a valid packed group is reported by `validate_group`
  with the right kind, and the trainer's `collate_groups` never turns any group (valid or not)
  into non-finite tensors, and places valid rows exactly (shifted by one);
- extreme but contract-valid rows (logprobs down to float32's lowest) survive packing, JSON,
  validation and collation bit for bit;
- losses: top-K KL is a lower bound of the full-vocabulary KL and equals it when a row covers the
  vocabulary; every term is additive over micro-batches; -inf logits (a masked vocabulary) in
  float32, bfloat16 and float16 give finite losses and gradients; extreme teacher rows give a
  finite loss.
"""

from __future__ import annotations

import copy
import json
import math

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from hermes_opd.contract.constants import MASKED
from hermes_opd.contract.rows import FLOAT32_LOWEST
from hermes_opd.contract.validation import (
    DUPLICATE_ID,
    MISSING_ROW,
    NON_FINITE,
    POSITIVE_LOGPROB,
    ROW_AT_MASKED_POSITION,
    SHAPE,
    STUDENT_TOKEN_MISSING,
    TOPK_MASS,
    UNSORTED,
    ZERO_PADDING,
    validate_group,
)
from scoring.teacher_rows import normalize_row
from tests.support.groups import packed_sequences, teacher_distribution
from trainer_adapters.collate import BatchValidationError, collate_groups
from trainer_adapters.losses import grpo_loss, opd_token_loss, opd_topk_loss, topk_kl
from trainer_adapters.student_logprobs import gather_logprobs

pytestmark = pytest.mark.reliability

SETTINGS = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])

CORRUPTIONS = {
    "nan": NON_FINITE,
    "+inf": NON_FINITE,
    "-inf": NON_FINITE,
    "positive": POSITIVE_LOGPROB,
    "unsorted": UNSORTED,
    "student_missing": STUDENT_TOKEN_MISSING,
    "duplicate_id": DUPLICATE_ID,
    "row_at_masked": ROW_AT_MASKED_POSITION,
    "missing_row": MISSING_ROW,
    "zero_padding": ZERO_PADDING,
    "mass_over_one": TOPK_MASS,
    "rows_too_short": SHAPE,
}


def corrupt(group: dict, kind: str, pick) -> dict | None:
    """A deep copy of `group` with one corruption in sequence 0, or None when `kind` does not apply."""
    g = copy.deepcopy(group)
    tokens, masks = g["tokens"][0], g["masks"][0]
    ids_rows, lp_rows = g["distill_token_ids"][0], g["distill_logprobs"][0]
    k = g["overrides"][0]["opd"]["k"]
    scored = [p for p, row in enumerate(ids_rows) if row]
    masked = [p for p, m in enumerate(masks) if m == MASKED]
    if (
        kind in ("nan", "+inf", "-inf", "positive", "missing_row", "student_missing", "mass_over_one")
        and not scored
    ):
        return None
    if kind in ("nan", "+inf", "-inf", "positive"):
        pos = pick(scored)
        entry = pick(list(range(len(lp_rows[pos]))))
        lp_rows[pos][entry] = {"nan": math.nan, "+inf": math.inf, "-inf": -math.inf, "positive": 0.5}[kind]
    elif kind == "unsorted":
        candidates = [p for p in scored if len(lp_rows[p]) >= 2 and k >= 2 and lp_rows[p][0] > lp_rows[p][1]]
        if not candidates:
            return None
        pos = pick(candidates)
        ids_rows[pos][0], ids_rows[pos][1] = ids_rows[pos][1], ids_rows[pos][0]
        lp_rows[pos][0], lp_rows[pos][1] = lp_rows[pos][1], lp_rows[pos][0]
    elif kind == "student_missing":
        pos = pick(scored)
        ids_rows[pos][ids_rows[pos].index(tokens[pos])] = 99_999
    elif kind == "duplicate_id":
        candidates = [p for p in scored if len(ids_rows[p]) >= 2]
        if not candidates:
            return None
        pos = pick(candidates)
        ids_rows[pos][1] = ids_rows[pos][0]
    elif kind in ("row_at_masked", "zero_padding"):
        pos = pick(masked)
        ids_rows[pos], lp_rows[pos] = ([tokens[pos]], [-0.5]) if kind == "row_at_masked" else ([0], [0.0])
        if kind == "zero_padding" and tokens[pos] == 0:
            return None  # [0]/[0.0] on a token 0 is a row of the token itself
    elif kind == "missing_row":
        pos = pick(scored)
        ids_rows[pos], lp_rows[pos] = [], []
    elif kind == "mass_over_one":
        candidates = [p for p in scored if len(lp_rows[p]) >= 2]
        if not candidates:
            return None
        pos = pick(candidates)
        lp_rows[pos] = [math.log(0.9)] * len(lp_rows[pos])
    elif kind == "rows_too_short":
        ids_rows.pop()
        lp_rows.pop()
    return g


@SETTINGS
@given(group=packed_sequences(), kind=st.sampled_from(sorted(CORRUPTIONS)), data=st.data())
def test_every_single_corruption_is_reported_with_its_kind(group, kind, data):
    def pick(options):
        return data.draw(st.sampled_from(options))

    mutated = corrupt(group, kind, pick)
    assume(mutated is not None)
    kinds = {v.kind for v in validate_group(mutated)}
    assert CORRUPTIONS[kind] in kinds, (kind, kinds)
    assert validate_group(json.loads(json.dumps(mutated))), "the JSON trip must not hide the corruption"


def _float_tensors(batch):
    return [v for v in vars(batch).values() if isinstance(v, torch.Tensor) and v.is_floating_point()]


@SETTINGS
@given(group=packed_sequences(), kind=st.sampled_from([None, *sorted(CORRUPTIONS)]), data=st.data())
def test_collate_places_valid_rows_exactly_and_never_emits_non_finite_tensors(group, kind, data):
    def pick(options):
        return data.draw(st.sampled_from(options))

    if kind is None:
        batch = collate_groups([group])
        ids_rows, lp_rows = group["distill_token_ids"][0], group["distill_logprobs"][0]
        for pos in range(1, len(ids_rows)):
            width = len(ids_rows[pos])
            assert batch.teacher_topk_ids_BTK[0, pos - 1, :width].tolist() == ids_rows[pos]
            assert batch.teacher_topk_valid_BTK[0, pos - 1].sum().item() == width
            expected = np.asarray(lp_rows[pos], dtype=np.float32)
            assert np.array_equal(batch.teacher_topk_logprobs_BTK[0, pos - 1, :width].numpy(), expected)
        assert all(torch.isfinite(t).all() for t in _float_tensors(batch))
        return
    mutated = corrupt(group, kind, pick)
    assume(mutated is not None)
    try:
        batch = collate_groups([mutated])
    except BatchValidationError as exc:
        assert "group 0" in str(exc)
        return
    assert kind not in ("nan", "+inf", "-inf", "positive", "rows_too_short"), f"collate accepted {kind}"
    assert all(torch.isfinite(t).all() for t in _float_tensors(batch))


@st.composite
def extreme_row(draw):
    """A vLLM-like candidate list where some tokens get logprobs anywhere down to float32's lowest."""
    ids, lps, student, student_lp = draw(teacher_distribution())
    extreme = st.floats(min_value=FLOAT32_LOWEST, max_value=-1e4, width=32)
    lps = [draw(extreme) if i > 0 and draw(st.booleans()) else lp for i, lp in enumerate(lps)]
    if student in ids:
        student_lp = lps[ids.index(student)]
    elif draw(st.booleans()):
        student_lp = draw(extreme)
    return ids, lps, student, student_lp


@SETTINGS
@given(case=extreme_row(), k=st.integers(1, 8))
def test_extreme_valid_rows_survive_packing_json_validation_and_collation(case, k):
    ids, lps, student, student_lp = case
    row_ids, row_lps = normalize_row(ids, lps, student, student_lp, k)
    # Finite as float32 (the shortest repr of float32's lowest reads back a hair below it in float64).
    assert all(v <= 0 and np.isfinite(np.float32(v)) for v in row_lps)
    group = {
        "tokens": [[7, student]],
        "masks": [[MASKED, student]],
        "scores": [0.0],
        "inference_logprobs": [[1.0, -0.5]],
        "distill_token_ids": [[[], row_ids]],
        "distill_logprobs": [[[], row_lps]],
        "overrides": [
            {
                "opd": {
                    "format_version": 1,
                    "mode": "topk",
                    "k": k,
                    "turn_spans": [[1, 2]],
                    "turns": [_scored_turn(1, 2)],
                }
            }
        ],
    }
    round_tripped = json.loads(json.dumps(group))
    assert round_tripped == group
    assert validate_group(round_tripped) == []
    batch = collate_groups([round_tripped])
    assert np.array_equal(
        batch.teacher_topk_logprobs_BTK[0, 0, : len(row_lps)].numpy(), np.asarray(row_lps, dtype=np.float32)
    )
    assert all(torch.isfinite(t).all() for t in _float_tensors(batch))


def _scored_turn(start: int, end: int) -> dict:
    return {
        "span": [start, end],
        "message_index": 2,
        "status": "scored",
        "next_state_role": "tool",
        "hint": "check the output",
        "votes": {"n": 1, "positive": 1},
        "hint_insert_at": 0,
        "hint_token_ids": [1, 2],
        "teacher_prompt_len": start + 2,
    }


# -- losses -----------------------------------------------------------------------------------------
scales = st.sampled_from([0.01, 1.0, 10.0, 100.0])


@SETTINGS
@given(
    seed=st.integers(0, 2**31 - 1),
    v=st.integers(2, 40),
    s_scale=scales,
    t_scale=scales,
    full=st.booleans(),
    direction=st.sampled_from(["reverse", "forward"]),
)
def test_topk_kl_is_a_lower_bound_of_the_full_kl_and_exact_when_the_row_covers_the_vocab(
    seed, v, s_scale, t_scale, full, direction
):
    rng = np.random.default_rng(seed)
    n = 6
    student_logits = torch.tensor(rng.standard_normal((n, v)) * s_scale, dtype=torch.float64)
    teacher_logits = torch.tensor(rng.standard_normal((n, v)) * t_scale, dtype=torch.float64)
    log_s, log_t = torch.log_softmax(student_logits, -1), torch.log_softmax(teacher_logits, -1)
    if direction == "reverse":
        exact = (log_s.exp() * (log_s - log_t)).sum(-1)
    else:
        exact = (log_t.exp() * (log_t - log_s)).sum(-1)
    k = v if full else int(rng.integers(1, v + 1))
    ids = torch.stack([torch.tensor(rng.permutation(v)[:k]) for _ in range(n)])
    valid = torch.ones(n, k, dtype=torch.bool)
    approx = topk_kl(log_s.gather(-1, ids).float(), log_t.gather(-1, ids).float(), valid, direction=direction)
    exact = exact.float()
    tolerance = 2e-4 + 2e-4 * exact.abs()
    # The tail bin's mass is 1 - (the row's mass), from float32 logprobs: a tail under about 1e-5
    # cannot be resolved (float32 spacing near 1 is 6e-8 per added term), and its log then carries
    # the error into the other side's tail term. Found by this test: seed=726, v=15, scales 10, a
    # teacher tail of 4.85e-7 computed as 4.23e-7 put the bound 0.13 nats too high, with 99.7 % of
    # the student's mass in the tail. The bound is checked where both tails are resolvable.
    tails = [1 - lp.gather(-1, ids).exp().sum(-1) for lp in (log_s, log_t)]
    resolvable = (tails[0] > 1e-5) & (tails[1] > 1e-5) if not full else torch.ones(n, dtype=torch.bool)
    assert (approx <= exact + tolerance)[resolvable].all(), (approx, exact, tails)
    assert (approx >= -1e-5).all()
    if full:
        assert torch.allclose(approx, exact, rtol=2e-3, atol=2e-4), (approx, exact)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**31 - 1), split=st.integers(1, 3), scale=scales)
def test_every_loss_term_is_additive_over_micro_batches(seed, split, scale):
    rng = np.random.default_rng(seed)
    B, T, V, K = 4, 5, 11, 3
    logits = torch.tensor(rng.standard_normal((B, T, V)) * scale, dtype=torch.float32)
    targets = torch.tensor(rng.integers(0, V, (B, T)))
    mask = torch.tensor(rng.random((B, T)) < 0.8)
    behaviour = torch.tensor(-rng.exponential(1.0, (B, T)), dtype=torch.float32)
    advantages = torch.tensor(rng.normal(0, 1, (B, T)), dtype=torch.float32)
    teacher_tok = torch.tensor(-rng.exponential(2.0, (B, T)), dtype=torch.float32)
    ids = torch.tensor(np.stack([[rng.permutation(V)[:K] for _ in range(T)] for _ in range(B)]))
    teacher_topk = torch.log_softmax(torch.tensor(rng.standard_normal((B, T, V)), dtype=torch.float32), -1)
    teacher_topk = teacher_topk.gather(-1, ids)
    valid = torch.tensor(rng.random((B, T, K)) < 0.7) & mask[..., None]
    total_tokens, total_rows = int(mask.sum()), int(valid.any(-1).sum())

    def terms(rows: slice, param: torch.Tensor):
        lp = gather_logprobs(param[rows], targets[rows][..., None])[..., 0]
        topk = gather_logprobs(param[rows], ids[rows])
        return [
            grpo_loss(lp, behaviour[rows], advantages[rows], mask[rows], num_tokens=total_tokens).value,
            opd_token_loss(lp, teacher_tok[rows], mask[rows], num_tokens=total_tokens).value,
            opd_topk_loss(topk, teacher_topk[rows], valid[rows], num_tokens=total_rows).value,
        ]

    whole_param = logits.clone().requires_grad_(True)
    whole = terms(slice(0, B), whole_param)
    parts_param = logits.clone().requires_grad_(True)
    parts = [terms(slice(0, split), parts_param), terms(slice(split, B), parts_param)]
    for index, value in enumerate(whole):
        summed = parts[0][index] + parts[1][index]
        assert torch.allclose(value, summed, rtol=1e-5, atol=1e-6), (index, value, summed)
        (g_whole,) = torch.autograd.grad(value, whole_param, retain_graph=True)
        (g_parts,) = torch.autograd.grad(summed, parts_param, retain_graph=True)
        assert torch.allclose(g_whole, g_parts, rtol=1e-4, atol=1e-6), index


def _masked_vocab_case(seed: int, dtype: torch.dtype):
    rng = np.random.default_rng(seed)
    B, T, V, K = 2, 4, 12, 3
    base = torch.tensor(rng.standard_normal((B, T, V)) * 5, dtype=torch.float32)
    blocked = torch.tensor(rng.random((B, T, V)) < 0.4)
    blocked[..., 0] = False  # at least one token stays possible
    base = base.masked_fill(blocked, float("-inf"))
    logits = base.to(dtype).requires_grad_(True)
    targets = torch.tensor(rng.integers(0, V, (B, T)))  # may be a blocked token: logprob -inf
    ids = torch.tensor(np.stack([[rng.permutation(V)[:K] for _ in range(T)] for _ in range(B)]))
    mask = torch.ones(B, T, dtype=torch.bool)
    teacher_topk = torch.log_softmax(torch.tensor(rng.standard_normal((B, T, V)), dtype=torch.float32), -1)
    return logits, targets, ids, mask, teacher_topk.gather(-1, ids)


LOSSES = {
    "grpo": lambda lp, topk, mask, t: grpo_loss(lp, torch.full_like(lp, -1.0), torch.ones_like(lp), mask),
    "opd_token_ppo": lambda lp, topk, mask, t: opd_token_loss(
        lp, torch.full_like(lp, -2.0), mask, behaviour_logprobs_BT=torch.full_like(lp, -1.0)
    ),
    "opd_topk_reverse": lambda lp, topk, mask, t: opd_topk_loss(
        topk, t, torch.ones_like(topk, dtype=torch.bool)
    ),
    "opd_topk_forward": lambda lp, topk, mask, t: opd_topk_loss(
        topk, t, torch.ones_like(topk, dtype=torch.bool), direction="forward"
    ),
    "opd_token": lambda lp, topk, mask, t: opd_token_loss(lp, torch.full_like(lp, -2.0), mask),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("loss", list(LOSSES))
def test_masked_vocabulary_logits_give_finite_losses_and_gradients(loss, dtype):
    for seed in range(5):
        logits, targets, ids, mask, teacher = _masked_vocab_case(seed, dtype)
        lp = gather_logprobs(logits, targets[..., None])[..., 0]
        topk = gather_logprobs(logits, ids)
        term = LOSSES[loss](lp, topk, mask, teacher)
        (grad,) = torch.autograd.grad(term.value, logits)
        assert torch.isfinite(term.value), (seed, term.value)
        assert torch.isfinite(grad).all(), seed
        for name, value in term.metrics.items():
            assert math.isfinite(float(value)), (seed, name, value)


def test_extreme_but_valid_teacher_rows_give_a_finite_topk_loss():
    T = 16
    row_ids, row_lps = normalize_row([0, 1, 2], [-0.01, -5.0, -3.0e38], 2, None, 3)
    assert (
        validate_group(
            {
                "tokens": [[7, 2]],
                "masks": [[MASKED, 2]],
                "scores": [0.0],
                "inference_logprobs": [[1.0, -0.5]],
                "distill_token_ids": [[[], row_ids]],
                "distill_logprobs": [[[], row_lps]],
                "overrides": [
                    {
                        "opd": {
                            "format_version": 1,
                            "mode": "topk",
                            "k": 3,
                            "turn_spans": [[1, 2]],
                            "turns": [_scored_turn(1, 2)],
                        }
                    }
                ],
            }
        )
        == []
    )
    logits = torch.zeros(1, T, 8, requires_grad=True)
    ids = torch.tensor(row_ids).expand(1, T, 3)
    teacher = torch.tensor(row_lps, dtype=torch.float32).expand(1, T, 3)
    term = opd_topk_loss(gather_logprobs(logits, ids), teacher, torch.ones(1, T, 3, dtype=torch.bool))
    assert torch.isfinite(term.value), term.value
