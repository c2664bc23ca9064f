"""Collation of Atropos groups: the causal shift, ragged rows, advantages and input validation."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch

from trainer_adapters.collate import BatchValidationError, CollateOptions, collate_groups, group_advantages
from trainer_adapters.losses import topk_kl
from trainer_adapters.student_logprobs import gather_logprobs


def _group() -> dict:
    """Two sequences: prompt [5, 6] then generated tokens; ragged teacher rows."""
    return {
        "tokens": [[5, 6, 7, 8], [5, 6, 9]],
        "masks": [[-100, -100, 7, 8], [-100, -100, 9]],
        "scores": [1.0, 0.0],
        "inference_logprobs": [[1.0, 1.0, -0.5, -0.25], [1.0, 1.0, -1.0]],
        "distill_token_ids": [[[], [], [7, 3], [2, 4, 8]], [[], [], [9]]],
        "distill_logprobs": [[[], [], [-0.1, -3.0], [-0.5, -1.5, -2.5]], [[], [], [-0.7]]],
        "overrides": [{"opd": {"format_version": 1}}, {"opd": {"format_version": 1}}],
    }


def test_shift_convention_by_hand():
    b = collate_groups([_group()])
    assert b.input_ids_BT.tolist() == [[5, 6, 7], [5, 6, 0]]
    assert b.target_ids_BT.tolist() == [[6, 7, 8], [6, 9, 0]]
    assert b.attention_mask_BT.tolist() == [[True, True, True], [True, True, False]]
    assert b.loss_mask_BT.tolist() == [[False, True, True], [False, True, False]]
    assert b.inference_logprobs_BT.tolist() == [[0.0, -0.5, -0.25], [0.0, -1.0, 0.0]]
    # target position j holds distill row j + 1: row 2 (scoring token 7) sits at j = 1
    assert b.teacher_topk_ids_BTK[0, 1].tolist() == [7, 3, 0]
    assert b.teacher_topk_ids_BTK[0, 2].tolist() == [2, 4, 8]
    assert b.teacher_topk_valid_BTK[0].tolist() == [[False] * 3, [True, True, False], [True] * 3]
    assert b.teacher_topk_logprobs_BTK[0, 1].tolist() == pytest.approx([-0.1, -3.0, 0.0])
    torch.testing.assert_close(
        b.teacher_token_logprobs_BT, torch.tensor([[0.0, -0.1, -2.5], [0.0, -0.7, 0.0]])
    )
    assert b.teacher_mask_BT.tolist() == [[False, True, True], [False, True, False]]
    assert b.input_ids_BT.shape == (2, 3) and b.teacher_topk_ids_BTK.shape == (2, 3, 3)
    assert b.input_ids_BT.dtype == torch.int64 and b.teacher_topk_logprobs_BTK.dtype == torch.float32


def test_shift_convention_against_a_model_that_is_its_own_teacher():
    """A bigram 'model' (logits[j] = E[input_ids[j]]) scores its own tokens; the env-style rows are
    the model's distribution over the token AT pos, i.e. log_softmax(E[tokens[pos - 1]]). After
    collation, the student (the same model) must match the teacher exactly at every row: any
    off-by-one between rows and logits would show up as a non-zero KL."""
    V, K = 16, 4
    E = torch.randn(V, V, generator=torch.Generator().manual_seed(0)) * 3
    tokens = [3, 1, 4, 1, 5, 9, 2, 6]
    masks = [-100, -100] + tokens[2:]
    ids_rows, lp_rows = [[], []], [[], []]
    for pos in range(2, len(tokens)):
        dist = torch.log_softmax(E[tokens[pos - 1]], -1)
        top = dist.topk(K)
        ids, lps = top.indices.tolist(), top.values.tolist()
        if tokens[pos] not in ids:
            ids.append(tokens[pos])
            lps.append(dist[tokens[pos]].item())
        ids_rows.append(ids)
        lp_rows.append(lps)
    group = {
        "tokens": [tokens],
        "masks": [masks],
        "scores": [0.0],
        "distill_token_ids": [ids_rows],
        "distill_logprobs": [lp_rows],
    }
    b = collate_groups([group])
    logits = E[b.input_ids_BT]
    student_topk = gather_logprobs(logits, b.teacher_topk_ids_BTK)
    student_token = gather_logprobs(logits, b.target_ids_BT[..., None])[..., 0]
    kl = topk_kl(student_topk, b.teacher_topk_logprobs_BTK, b.teacher_topk_valid_BTK)
    assert b.teacher_mask_BT.sum() == len(tokens) - 2
    assert kl.abs().max().item() < 1e-5
    torch.testing.assert_close(
        student_token[b.teacher_mask_BT], b.teacher_token_logprobs_BT[b.teacher_mask_BT], atol=1e-5, rtol=0
    )
    # The wrong shift (row j instead of j + 1) would not match:
    wrong = topk_kl(
        student_topk[:, 1:], b.teacher_topk_logprobs_BTK[:, :-1], b.teacher_topk_valid_BTK[:, :-1]
    )
    assert wrong.max().item() > 0.1


def test_ragged_rows_pad_to_the_batch_max_k():
    g1, g2 = _group(), _group()
    g2["distill_token_ids"][0][3] = [8, 1, 2, 3, 4, 5]
    g2["distill_logprobs"][0][3] = [-0.1, -3.0, -4.0, -5.0, -6.0, -7.0]
    b = collate_groups([g1, g2])
    assert b.teacher_topk_ids_BTK.shape == (4, 3, 6)
    assert b.teacher_topk_valid_BTK.sum(-1).tolist() == [[0, 2, 3], [0, 1, 0], [0, 2, 6], [0, 1, 0]]
    assert b.group_index_B.tolist() == [0, 0, 1, 1]
    # invalid entries are zero-filled and masked
    assert b.teacher_topk_logprobs_BTK[~b.teacher_topk_valid_BTK].abs().sum() == 0


def test_group_without_distill_fields_has_no_teacher_positions():
    g = _group()
    del g["distill_token_ids"], g["distill_logprobs"]
    b = collate_groups([g])
    assert b.teacher_mask_BT.sum() == 0 and b.teacher_topk_ids_BTK.shape[-1] == 1
    assert b.loss_mask_BT.sum() == 3


def test_missing_inference_logprobs_fall_back_to_current_policy():
    g = _group()
    del g["inference_logprobs"]
    b = collate_groups([g])
    assert b.has_inference_logprobs_B.tolist() == [False, False]
    current = torch.full((2, 3), -0.3, requires_grad=True)
    behaviour = b.behaviour_logprobs(current)
    assert torch.equal(behaviour, current.detach()) and not behaviour.requires_grad


def test_dense_k1_rows_are_read_through_their_provenance():
    """dense_k1 puts one entry at EVERY position: the teacher's logprob inside scored turns, a copy
    of inference_logprobs elsewhere (1.0 at masked positions). Only the scored rows are teacher data."""
    g = _group()
    g["distill_token_ids"] = [[[5], [6], [7], [8]], [[5], [6], [9]]]
    g["distill_logprobs"] = [[[1.0], [1.0], [-0.1], [-0.25]], [[1.0], [1.0], [-1.0]]]
    turns0 = [{"span": [2, 3], "status": "scored"}, {"span": [3, 4], "status": "no_hint"}]
    turns1 = [{"span": [2, 3], "status": "teacher_error"}]
    g["overrides"] = [{"opd": {"mode": "dense_k1", "k": 50, "turns": t}} for t in (turns0, turns1)]
    b = collate_groups([g])
    assert b.teacher_mask_BT.tolist() == [[False, True, False], [False, False, False]]
    assert b.teacher_topk_ids_BTK.shape[-1] == 1
    assert b.teacher_topk_ids_BTK[0, 1, 0].item() == 7
    assert b.teacher_token_logprobs_BT[0, 1].item() == pytest.approx(-0.1)
    g["overrides"][0]["opd"].pop("turns")
    with pytest.raises(BatchValidationError, match="group 0, sequence 0: dense_k1 rows need"):
        collate_groups([g])


def test_group_advantages_numbers():
    adv = group_advantages([1.0, 0.0, 0.0, 1.0], eps=1e-6)
    assert adv.tolist() == pytest.approx([1.0, -1.0, -1.0, 1.0], abs=1e-5)  # mean .5, std .5
    assert group_advantages([0.1, 0.1, 0.1]).tolist() == [0.0, 0.0, 0.0]  # exactly zero
    assert group_advantages([3.0]).tolist() == [0.0]
    assert group_advantages([2.0, 0.0], normalize_std=False).tolist() == [1.0, -1.0]
    b = collate_groups([_group()])
    assert b.advantages_BT[0].tolist() == pytest.approx([0.0, 1.0, 1.0], abs=1e-5)
    assert b.advantages_BT[1].tolist() == pytest.approx([0.0, -1.0, 0.0], abs=1e-5)


def test_env_advantages_are_used_as_given_and_shifted():
    g = _group()
    g["advantages"] = [[9.0, 9.0, 0.5, -0.5], [9.0, 9.0, 2.0]]
    b = collate_groups([g])
    assert b.advantages_BT.tolist() == [[0.0, 0.5, -0.5], [0.0, 2.0, 0.0]]


def test_select_and_micro_batches_trim_padding():
    g = _group()
    b = collate_groups([g, _group()])
    parts = b.micro_batches(3)
    assert [p.batch_size for p in parts] == [3, 1]
    only_short = b.select([1])
    assert only_short.input_ids_BT.shape == (1, 2)  # trailing padding column dropped
    assert only_short.teacher_topk_ids_BTK.shape == (1, 2, 1)  # unused K entries dropped
    assert only_short.target_ids_BT.tolist() == [[6, 9]]
    assert sum(p.num_generated_tokens for p in parts) == b.num_generated_tokens


_PER_POSITION = ("tokens", "masks", "inference_logprobs", "distill_token_ids", "distill_logprobs")


def _error(group_patch, **options) -> str:
    groups = [_group(), _group()]
    group_patch(groups[1])
    with pytest.raises(BatchValidationError) as info:
        collate_groups(groups, CollateOptions(**options))
    return str(info.value)


def _set(path, value):
    def patch(g):
        target = g
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value

    return patch


@pytest.mark.parametrize(
    ("patch", "expected"),
    [
        (
            _set(("masks", 0), [-100, -100, 7]),
            "group 1, sequence 0: masks is not a list of 4 integers [shape]",
        ),
        (
            _set(("inference_logprobs", 1), [1.0, 1.0]),
            "group 1, sequence 1: inference_logprobs is not a list of 3 numbers [shape]",
        ),
        (_set(("scores",), [1.0]), "group 1: 'scores' has 1 entries but 'tokens' has 2 sequences"),
        (
            _set(("distill_logprobs", 0), [[], [], [-0.1, -3.0]]),
            "group 1, sequence 0: distill_logprobs has 3 rows, tokens has 4 [shape]",
        ),
        (
            _set(("distill_logprobs", 0, 3), [-0.5, -1.5]),
            "group 1, sequence 0, position 3: row has 3 ids but 2 logprobs [shape]",
        ),
        (
            _set(("distill_logprobs", 0, 2), [-0.1, 0.5]),
            "group 1, sequence 0, position 2: logprob 0.5 > 0 at entry 1 [positive_logprob]",
        ),
        (
            _set(("distill_logprobs", 0, 3), [-0.5, float("nan"), -2.5]),
            "group 1, sequence 0, position 3: logprob nan at entry 1 [non_finite]",
        ),
        (
            _set(("distill_logprobs", 1, 2), [-math.inf]),
            "group 1, sequence 1, position 2: logprob -inf at entry 0 [non_finite]",
        ),
        (
            _set(("inference_logprobs", 0, 3), 0.2),
            "group 1, sequence 0, position 3: inference_logprobs is 0.2 > 0 [positive_logprob]",
        ),
        (
            _set(("inference_logprobs", 0, 2), math.inf),
            "group 1, sequence 0, position 2: inference_logprobs is inf [non_finite]",
        ),
        (
            lambda g: (
                g["distill_token_ids"][0].__setitem__(1, [6]),
                g["distill_logprobs"][0].__setitem__(1, [-1.0]),
            ),
            "group 1, sequence 0, position 1: masked (non-generated) position holds a row",
        ),
        (
            _set(("distill_token_ids", 0, 3), [2, 4, 5]),
            "group 1, sequence 0, position 3: student token 8 is not in the row ids=[2, 4, 5]",
        ),
        (
            _set(("distill_token_ids", 0, 3), [2, 8, 8]),
            "group 1, sequence 0, position 3: token id 8 appears more than once [duplicate_id]",
        ),
        (
            _set(("distill_logprobs", 0, 3), [-0.1, -0.2, -0.3]),
            "group 1, sequence 0, position 3: probability mass of the row's entries exceeds 1: logsumexp 0.9019",
        ),
        (
            _set(("distill_token_ids", 0, 3), [2, 4.5, 8]),
            "group 1, sequence 0, position 3: row ids are not all integers [shape]",
        ),
        (_set(("masks", 1, 2), 4), "group 1, sequence 1, position 2: mask 4 is neither -100 nor the token 9"),
        (
            lambda g: [g[key].__setitem__(1, g[key][1][-1:]) for key in _PER_POSITION],
            "group 1, sequence 1: sequence has 1 tokens",
        ),
        (_set(("scores", 1), math.nan), "group 1, sequence 1: score nan is not a finite number"),
        (lambda g: g.pop("masks"), "group 1: missing required field 'masks'"),
        (
            lambda g: g.pop("distill_logprobs"),
            "group 1: distill_token_ids and distill_logprobs must come together",
        ),
    ],
)
def test_validation_errors_name_group_sequence_and_position(patch, expected):
    assert expected in _error(patch)


def test_vocab_range_is_checked_when_known():
    msg = _error(_set(("distill_token_ids", 0, 3), [2, 400, 8]), vocab_size=300)
    assert "group 1, sequence 0, position 3: distill token id 400 outside the vocabulary [0, 300)" in msg


def test_error_carries_structured_location():
    g = _group()
    g["distill_logprobs"][1][2] = [0.1]
    with pytest.raises(BatchValidationError) as info:
        collate_groups([g])
    assert (info.value.group, info.value.sequence, info.value.position) == (0, 1, 2)


def test_input_is_not_mutated():
    g = _group()
    before = copy.deepcopy(g)
    collate_groups([g])
    assert g == before


def test_long_sequence_collates_quickly():
    """Validation is vectorised: 8 x 2048 tokens with K=51 rows must not take seconds."""
    import time

    rng = np.random.default_rng(0)
    n, k = 2048, 51
    tokens = rng.integers(0, 1000, n).tolist()
    masks = [-100] * 100 + tokens[100:]
    ids_rows = [[] for _ in range(100)]
    lp_rows = [[] for _ in range(100)]
    for pos in range(100, n):
        ids = [tokens[pos]] + [i for i in range(2000, 2000 + k - 1)]
        ids_rows.append(ids)
        lp_rows.append([-1.0] + [-10.0] * (k - 1))
    group = {
        "tokens": [tokens] * 8,
        "masks": [masks] * 8,
        "scores": [float(i % 2) for i in range(8)],
        "distill_token_ids": [ids_rows] * 8,
        "distill_logprobs": [lp_rows] * 8,
    }
    start = time.perf_counter()
    b = collate_groups([group])
    assert time.perf_counter() - start < 5.0
    assert b.teacher_topk_ids_BTK.shape == (8, n - 1, k)


@pytest.mark.parametrize(("excess", "accepted"), [(5e-5, True), (5e-4, False)])
def test_trainer_checks_with_the_contract_tolerance(excess, accepted):
    """One validator, one tolerance: a row whose mass exceeds 1 by more than TOPK_MASS_TOLERANCE
    (1e-4 in log space) is refused by the trainer exactly as by `hermes-opd validate`."""
    from hermes_opd.contract.constants import TOPK_MASS_TOLERANCE
    from hermes_opd.contract.validation import validate_group

    assert TOPK_MASS_TOLERANCE == 1e-4
    g = _group()
    # two entries: log(p) + log(1 - p) + excess... built so that logsumexp(row) == excess exactly
    p = 0.75
    g["distill_token_ids"][0][3] = [8, 2]
    g["distill_logprobs"][0][3] = [math.log(p) + excess, math.log(1 - p) + excess]
    strict = [v.kind for v in validate_group(g, require_provenance=False)]
    if accepted:
        assert strict == []
        assert collate_groups([g]).teacher_mask_BT.sum() == 3
    else:
        assert strict == ["topk_mass"]
        with pytest.raises(BatchValidationError, match=r"position 3: probability mass .* \[topk_mass\]"):
            collate_groups([g])
