"""Tests for hermes_opd.contract.rows: packing, dense_k1 and validate_group.

`build_group` here makes realistic, contract-valid ScoredDataGroups; test_validate_file.py and
test_inspector.py import it (pytest puts tests/ on sys.path).
"""

from __future__ import annotations

import copy
import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hermes_opd.contract.constants import FORMAT_VERSION, MASKED, MODE_TOPK
from hermes_opd.contract.provenance import parse_provenance, scored_positions
from hermes_opd.contract.rows import empty_rows, make_opd_block, round_logprobs, to_dense_k1
from hermes_opd.contract.validation import validate_group
from scoring.teacher_rows import normalize_row, place_turn_rows
from tests.support.groups import (
    _scored_turn,
    build_group,
    packed_sequences,
    teacher_distribution,
    to_dense_group,
)


def kinds(violations) -> set[str]:
    return {v.kind for v in violations}


# --- packing ---------------------------------------------------------------------------------


def test_empty_rows_are_independent_lists():
    ids, lps = empty_rows(3)
    assert ids == [[], [], []] and lps == [[], [], []]
    ids[0].append(1)
    assert ids[1] == []
    with pytest.raises(ValueError):
        empty_rows(-1)


def test_round_logprobs_is_float32_exact_and_short():
    values = [-0.1, -2.718281828459045, -1e-9, -123.456789012, 0.0]
    rounded = round_logprobs(values)
    for original, short in zip(values, rounded, strict=True):
        assert np.float32(short) == np.float32(original)
    assert json.dumps(rounded) == "[-0.1, -2.7182817, -1e-09, -123.45679, 0.0]"
    assert round_logprobs([]) == []


def test_normalize_row_sorts_keeps_top_k_and_appends_student():
    probs = {5: 0.05, 7: 0.5, 9: 0.25, 11: 0.125}
    ids, lps = normalize_row(
        list(probs), [math.log(p) for p in probs.values()], student_token=5, student_token_logprob=None, k=2
    )
    assert ids == [7, 9, 5]
    assert lps == round_logprobs([math.log(0.5), math.log(0.25), math.log(0.05)])


def test_normalize_row_short_candidate_list_inserts_student_in_order():
    ids, lps = normalize_row([1, 2], [-1.0, -3.0], student_token=8, student_token_logprob=-2.0, k=5)
    assert ids == [1, 8, 2] and lps == [-1.0, -2.0, -3.0]


def test_normalize_row_student_in_top_k_is_not_appended():
    ids, lps = normalize_row([5, 7, 9], [-3.0, -1.0, -2.0], student_token=9, student_token_logprob=-7.0, k=2)
    assert ids == [7, 9] and lps == [-1.0, -2.0]


def test_normalize_row_uses_given_student_logprob_when_not_among_candidates():
    ids, lps = normalize_row([1, 2], [-0.1, -2.5], student_token=42, student_token_logprob=-9.25, k=2)
    assert ids == [1, 2, 42] and lps == [-0.1, -2.5, -9.25]


def test_normalize_row_missing_student_logprob_raises():
    with pytest.raises(ValueError, match="not among"):
        normalize_row([1, 2], [-0.1, -2.5], student_token=42, student_token_logprob=None, k=2)


def test_normalize_row_ties_keep_input_order():
    ids, _ = normalize_row(
        [30, 10, 20], [-2.0, -2.0, -2.0], student_token=10, student_token_logprob=None, k=3
    )
    assert ids == [30, 10, 20]


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, 0.5, 1e-3, -1e40])
def test_normalize_row_rejects_non_finite_and_positive(bad):
    with pytest.raises(ValueError):
        normalize_row([1, 2], [-0.1, bad], student_token=1, student_token_logprob=None, k=2)
    with pytest.raises(ValueError):
        normalize_row([1], [-0.1], student_token=3, student_token_logprob=bad, k=2)


def test_normalize_row_clamps_tiny_positive_noise():
    ids, lps = normalize_row([4, 5], [5e-7, -20.0], student_token=4, student_token_logprob=None, k=2)
    assert ids == [4, 5] and lps[0] == 0.0


@pytest.mark.parametrize(
    ("ids", "lps", "k", "match"),
    [
        ([1, 2], [-0.1], 2, "differ in length"),
        ([1, 1], [-0.1, -0.2], 2, "duplicate"),
        ([1, 2], [-0.1, -0.2], 0, "k must be"),
        ([1, 2], [-0.01, -0.02], 2, "mass exceeds 1"),
        ([1, 2], [-0.1, -1e300], 2, "float32"),
    ],
)
def test_normalize_row_rejects_bad_input(ids, lps, k, match):
    with pytest.raises(ValueError, match=match):
        normalize_row(ids, lps, student_token=1, student_token_logprob=None, k=k)


def test_place_turn_rows_writes_copies_and_rejects_overlap_and_overflow():
    ids_rows, lp_rows = empty_rows(5)
    turn_ids = [[1, 2], [3]]
    turn_lps = [[-0.1, -2.0], [-0.3]]
    place_turn_rows(ids_rows, lp_rows, 2, turn_ids, turn_lps)
    assert ids_rows == [[], [], [1, 2], [3], []]
    assert lp_rows == [[], [], [-0.1, -2.0], [-0.3], []]
    turn_ids[0].append(99)
    assert ids_rows[2] == [1, 2]
    with pytest.raises(ValueError, match="already holds"):
        place_turn_rows(ids_rows, lp_rows, 3, [[7]], [[-1.0]])
    with pytest.raises(ValueError, match="do not fit"):
        place_turn_rows(ids_rows, lp_rows, 4, [[7], [8]], [[-1.0], [-1.0]])
    with pytest.raises(ValueError, match="ids but"):
        place_turn_rows(ids_rows, lp_rows, 0, [[7, 8]], [[-1.0]])


# --- dense_k1 --------------------------------------------------------------------------------


def test_to_dense_k1_one_entry_everywhere():
    tokens = [10, 11, 12, 13, 14]
    masks = [MASKED, MASKED, 12, 13, 14]
    inference = [1.0, 1.0, -0.25, -0.5, -0.125]
    ids_rows = [[], [], [40, 12], [], []]
    lp_rows = [[], [], [-0.1, -3.5], [], []]
    dense_ids, dense_lps = to_dense_k1(tokens, masks, inference, ids_rows, lp_rows)
    assert dense_ids == [[10], [11], [12], [13], [14]]
    assert dense_lps == [[1.0], [1.0], [-3.5], [-0.5], [-0.125]]
    # stock tinker-atropos does np.array(rows) and requires shape [n, 1]
    assert np.array(dense_ids).shape == (5, 1) and np.array(dense_lps).shape == (5, 1)
    advantages = [t - s for (t,), s in zip(dense_lps, inference, strict=True)]
    assert advantages[3] == 0.0 and advantages[4] == 0.0


def test_to_dense_k1_rejects_bad_rows():
    with pytest.raises(ValueError, match="lacks the student token"):
        to_dense_k1([1, 2], [MASKED, 2], [1.0, -0.1], [[], [7]], [[], [-0.2]])
    with pytest.raises(ValueError, match="masked"):
        to_dense_k1([1, 2], [MASKED, 2], [1.0, -0.1], [[1], []], [[-0.2], []])
    with pytest.raises(ValueError, match="lengths differ"):
        to_dense_k1([1, 2], [MASKED], [1.0, -0.1], [[], []], [[], []])


def test_dense_group_validates_clean_and_scored_positions_follow_turns():
    group = build_group(seed=3)
    dense = to_dense_group(group)
    assert validate_group(dense) == []
    for seq in range(len(group["tokens"])):
        assert scored_positions(dense, seq).tolist() == scored_positions(group, seq).tolist()


def test_dense_group_mismatch_and_wrong_shape_are_caught():
    dense = to_dense_group(build_group(seed=4))
    masks = dense["masks"][0]
    unscored = next(p for p, m in enumerate(masks) if m != MASKED and not scored_positions(dense, 0)[p])
    dense["distill_logprobs"][0][unscored] = [dense["inference_logprobs"][0][unscored] - 0.5]
    dense["distill_token_ids"][1][0] = []
    dense["distill_logprobs"][1][0] = []
    found = {(v.kind, v.seq, v.pos) for v in validate_group(dense)}
    assert ("dense_k1_mismatch", 0, unscored) in found
    assert ("shape", 1, 0) in found


# --- validate_group --------------------------------------------------------------------------


def test_built_group_is_clean_and_json_round_trips():
    group = build_group()
    assert validate_group(group) == []
    assert validate_group(json.loads(json.dumps(group))) == []


def test_provenance_parse_and_scored_turns():
    group = build_group(statuses=("scored", "no_hint", "no_next_state"))
    provenance = parse_provenance(group["overrides"][0]["opd"])
    assert provenance.problems == []
    assert provenance.format_version == FORMAT_VERSION
    assert [t.status for t in provenance.scored_turns] == ["scored"]


def test_reference_style_zero_padding_is_caught():
    group = build_group()
    for seq, rows in enumerate(group["distill_token_ids"]):
        for pos, row in enumerate(rows):
            if not row:
                rows[pos] = [0]
                group["distill_logprobs"][seq][pos] = [0.0]
    violations = validate_group(group)
    assert kinds(violations) == {"zero_padding"}
    assert all(v.seq is not None and v.pos is not None for v in violations)


def test_turn_with_invalid_provenance_is_reported():
    group = build_group()
    opd = group["overrides"][1]["opd"]
    opd["format_version"] = 99
    opd["turns"][0]["teacher_prompt_len"] += 1
    messages = [v.message for v in validate_group(group) if v.kind == "provenance" and v.seq == 1]
    assert any("format_version" in m for m in messages)
    assert any("teacher_prompt_len" in m for m in messages)


def test_missing_overrides_is_one_group_level_violation():
    group = build_group()
    del group["overrides"]
    violations = validate_group(group)
    assert [v for v in violations if v.kind == "provenance"][0].seq is None
    assert "provenance" in kinds(violations)


# --- property tests ----------------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(teacher_distribution(), st.integers(1, 12))
def test_normalize_row_properties(case, k):
    ids, lps, student, student_lp = case
    row_ids, row_lps = normalize_row(ids, lps, student, student_lp, k)
    assert student in row_ids
    assert len(row_ids) == len(row_lps) <= k + 1
    assert len(set(row_ids)) == len(row_ids)
    assert all(math.isfinite(v) and v <= 0 for v in row_lps)
    top = row_lps[: min(k, len(row_lps))]
    assert top == sorted(top, reverse=True)
    assert round_logprobs(row_lps) == row_lps
    assert all(json.loads(json.dumps(v)) == v for v in row_lps)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.floats(allow_nan=True, allow_infinity=True), min_size=1, max_size=8),
    st.integers(0, 3),
    st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True)),
    st.integers(1, 4),
)
def test_normalize_row_rejects_or_returns_a_valid_row(values, student, student_lp, k):
    ids = list(range(len(values)))
    try:
        row_ids, row_lps = normalize_row(ids, values, student, student_lp, k)
    except ValueError:
        return
    group = {
        "tokens": [[9, student]],
        "masks": [[MASKED, student]],
        "scores": [0.0],
        "inference_logprobs": [[1.0, -0.5]],
        "distill_token_ids": [[[], row_ids]],
        "distill_logprobs": [[[], row_lps]],
        "overrides": [{"opd": make_opd_block(MODE_TOPK, k, [(1, 2)], [_scored_turn(1, 2)])}],
    }
    assert validate_group(group) == []


@settings(max_examples=150, deadline=None)
@given(packed_sequences())
def test_pack_then_validate_is_clean_in_both_modes(group):
    assert validate_group(group) == []
    assert validate_group(json.loads(json.dumps(group))) == []
    for rows_lp in group["distill_logprobs"][0]:
        assert all(math.isfinite(v) and v <= 0 for v in rows_lp)
    for pos, row in enumerate(group["distill_token_ids"][0]):
        assert not row or group["tokens"][0][pos] in row
    assert validate_group(to_dense_group(group)) == []


def test_validate_group_is_fast_on_a_large_group():
    import time

    rng = np.random.default_rng(0)
    n, k, group_size = 8192, 50, 4
    tokens = rng.integers(1, 50_000, n).tolist()
    generated = np.zeros(n, dtype=bool)
    generated[200:] = True
    masks = [t if g else MASKED for t, g in zip(tokens, generated, strict=True)]
    lps_matrix = np.sort(np.log(rng.dirichlet(np.ones(k + 5), size=n))[:, :k], axis=1)[:, ::-1]
    ids_rows = [[tokens[p]] + list(range(60_000, 60_000 + k - 1)) if generated[p] else [] for p in range(n)]
    lp_rows = [lps_matrix[p].tolist() if generated[p] else [] for p in range(n)]
    inference = [-0.5 if g else 1.0 for g in generated]
    opd = make_opd_block(
        MODE_TOPK,
        k,
        [(200, n)],
        [
            {
                "span": [200, n],
                "status": "scored",
                "message_index": 2,
                "next_state_role": "user",
                "hint": "h",
                "votes": {},
                "hint_insert_at": 100,
                "replaced_range": [99, 100],
                "replacement_ids": [5, 6],
                "teacher_prompt_len": 201,
            }
        ],
    )
    group = {
        "tokens": [tokens] * group_size,
        "masks": [masks] * group_size,
        "scores": [0.0] * group_size,
        "inference_logprobs": [inference] * group_size,
        "distill_token_ids": [ids_rows] * group_size,
        "distill_logprobs": [lp_rows] * group_size,
        "overrides": [{"opd": opd}] * group_size,
    }
    started = time.perf_counter()
    violations = validate_group(group)
    elapsed = time.perf_counter() - started
    assert violations == []
    assert elapsed < 5.0, f"validate_group took {elapsed:.2f}s for {group_size}x{n} positions, K={k}"


# --- format versions: v2 splice provenance, v1 files still read --------------------------------


def _as_version_1(group: dict) -> dict:
    """The same group as a version-1 writer would have emitted it (hint ids spliced in at the anchor)."""
    v1 = copy.deepcopy(group)
    for override in v1["overrides"]:
        opd = override["opd"]
        opd["format_version"] = 1
        for turn in opd["turns"]:
            if turn["status"] == "scored":
                r0, r1 = turn.pop("replaced_range")
                replacement = turn.pop("replacement_ids")
                turn["hint_token_ids"] = replacement[: len(replacement) - (r1 - r0)] or [7]
                turn["teacher_prompt_len"] = turn["span"][0] + len(turn["hint_token_ids"])
    return v1


def test_version_1_groups_still_validate_and_rebuild_their_teacher_input():
    from hermes_opd.contract.provenance import teacher_input_ids

    v1 = _as_version_1(build_group(statuses=("scored", "scored", "no_next_state")))
    assert validate_group(v1) == []
    provenance = parse_provenance(v1["overrides"][0]["opd"])
    assert provenance.format_version == 1
    tokens = v1["tokens"][0]
    for turn in provenance.scored_turns:
        (r0, r1), replacement = turn.splice
        assert r0 == r1 == turn.hint_insert_at and replacement == turn.hint_token_ids
        start, end = turn.span
        ids = teacher_input_ids(tokens, turn)
        assert ids == tokens[: turn.hint_insert_at] + turn.hint_token_ids + tokens[turn.hint_insert_at : end]
        assert len(ids) - (end - start) == turn.teacher_prompt_len
    # v1 fields in a v2 block (or v2 fields in a v1 block) are not accepted silently.
    mixed = copy.deepcopy(v1)
    mixed["overrides"][0]["opd"]["format_version"] = 2
    messages = [v.message for v in validate_group(mixed) if v.kind == "provenance"]
    assert any(
        "replaced_range ([r0, r1]), replacement_ids and teacher_prompt_len are all required" in m
        for m in messages
    )


def test_version_2_splice_provenance_is_checked():
    from hermes_opd.contract.provenance import teacher_input_ids

    group = build_group(statuses=("scored", "no_hint", "no_next_state"))
    opd = group["overrides"][0]["opd"]
    turn = opd["turns"][0]
    start, end = turn["span"]
    record = parse_provenance(opd).scored_turns[0]
    tokens = group["tokens"][0]
    assert teacher_input_ids(tokens, record) == tokens[:10] + turn["replacement_ids"] + tokens[11:end]
    assert record.teacher_prompt_len == start - 1 + len(turn["replacement_ids"])

    def problems(**changes) -> list[str]:
        broken = copy.deepcopy(group)
        broken["overrides"][0]["opd"]["turns"][0].update(changes)
        return [v.message for v in validate_group(broken) if v.kind == "provenance" and v.seq == 0]

    assert any("break 0 <= r0 <= hint_insert_at <= r1" in m for m in problems(replaced_range=[12, 13]))
    assert any("break 0 <= r0 <= hint_insert_at <= r1" in m for m in problems(replaced_range=[10, start + 1]))
    assert any("replacement_ids is empty" in m for m in problems(replacement_ids=[]))
    assert any(
        f"teacher_prompt_len {start + 9} != span start {start} - 1 replaced + 4 replacement ids = {start + 3}"
        in m
        for m in problems(teacher_prompt_len=start + 9)
    )
    assert any("all required" in m for m in problems(replacement_ids="x"))


def test_no_anchor_is_a_turn_status():
    group = build_group(statuses=("no_anchor", "no_hint", "no_next_state"))
    assert validate_group(group) == []


def test_version_1_file_still_inspects(tmp_path):
    from hermes_opd.commands.inspect import main as inspect_main

    groups = [_as_version_1(build_group(seed=seed)) for seed in range(2)]
    path = tmp_path / "v1.jsonl"
    path.write_text("".join(json.dumps(g) + "\n" for g in groups), encoding="utf-8")
    assert inspect_main([str(path), "--out", str(tmp_path / "v1.html")]) == 0
    page = (tmp_path / "v1.html").read_text(encoding="utf-8")
    scored = sum(1 for g in groups for rows in g["distill_token_ids"] for row in rows if row)
    assert scored > 0 and page.count('class="tok scored') == scored
    assert 'class="badge scored"' in page and "teacher prompt" in page
