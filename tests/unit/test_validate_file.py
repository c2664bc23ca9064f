"""Tests for hermes_opd.commands.validate: every violation kind is caught with its seq/pos, exit codes."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path

import pytest

from hermes_opd.commands.validate import main, validate_jsonl
from hermes_opd.contract.constants import MASKED
from hermes_opd.contract.provenance import scored_positions
from hermes_opd.contract.validation import VIOLATION_KINDS
from tests.support.groups import build_group, to_dense_group

BROKEN_LINE = 2
"""Planted violations go in the group on line 2 (group index 1) of a 3-group file."""


def write_jsonl(path: Path, groups: list, wrap: bool = False) -> Path:
    with open(path, "w", encoding="utf-8") as handle:
        for group in groups:
            record = {"group": group, "step": 0} if wrap else group
            handle.write(json.dumps(record) + "\n")
    return path


def first_scored_pos(group: dict, seq: int) -> int:
    return int(scored_positions(group, seq).nonzero()[0][0])


def first_masked_pos(group: dict, seq: int) -> int:
    return group["masks"][seq].index(MASKED)


def first_unscored_generated_pos(group: dict, seq: int) -> int:
    scored = scored_positions(group, seq)
    return next(p for p, m in enumerate(group["masks"][seq]) if m != MASKED and not scored[p])


# Each planter breaks the group in one way and returns the (seq, pos) where it must be reported.
Planter = Callable[[dict], tuple[int | None, int | None]]


def plant_row_length_mismatch(group):
    pos = first_scored_pos(group, 1)
    group["distill_logprobs"][1][pos].pop()
    return 1, pos


def plant_row_list_too_short(group):
    group["distill_token_ids"][2].pop()
    return 2, None


def plant_missing_field(group):
    del group["inference_logprobs"]
    return None, None


def plant_nan(group):
    pos = first_scored_pos(group, 0) + 2
    group["distill_logprobs"][0][pos][1] = math.nan
    return 0, pos


def plant_positive(group):
    pos = first_scored_pos(group, 1) + 1
    group["distill_logprobs"][1][pos][-1] = 0.25
    return 1, pos


def plant_unsorted(group):
    pos = first_scored_pos(group, 2)
    lps = group["distill_logprobs"][2][pos]
    ids = group["distill_token_ids"][2][pos]
    lps[1], lps[2] = lps[2], lps[1]
    ids[1], ids[2] = ids[2], ids[1]
    if lps[1] == lps[2]:
        lps[1] = lps[2] + 1e-3
    return 2, pos


def plant_topk_mass(group):
    pos = first_scored_pos(group, 0) + 1
    row = group["distill_logprobs"][0][pos]
    group["distill_logprobs"][0][pos] = [-0.01 * (i + 1) for i in range(len(row))]
    return 0, pos


def plant_student_missing(group):
    pos = first_scored_pos(group, 1) + 3
    ids = group["distill_token_ids"][1][pos]
    student = group["tokens"][1][pos]
    ids[ids.index(student)] = 10_000 + pos
    return 1, pos


def plant_duplicate_id(group):
    pos = first_scored_pos(group, 0)
    ids = group["distill_token_ids"][0][pos]
    ids[1] = ids[2]
    return 0, pos


def plant_row_at_masked(group):
    pos = first_masked_pos(group, 2) + 1
    group["distill_token_ids"][2][pos] = [group["tokens"][2][pos]]
    group["distill_logprobs"][2][pos] = [-0.5]
    return 2, pos


def plant_unprovenanced_row(group):
    pos = first_unscored_generated_pos(group, 1)
    group["distill_token_ids"][1][pos] = [group["tokens"][1][pos]]
    group["distill_logprobs"][1][pos] = [-0.5]
    return 1, pos


def plant_missing_row(group):
    pos = first_scored_pos(group, 0) + 1
    group["distill_token_ids"][0][pos] = []
    group["distill_logprobs"][0][pos] = []
    return 0, pos


def plant_span_over_prompt(group):
    opd = group["overrides"][1]["opd"]
    start, end = opd["turn_spans"][1]
    opd["turn_spans"][1] = [start - 2, end]
    opd["turns"][1]["span"] = [start - 2, end]
    return 1, start - 2


def plant_span_past_end(group):
    opd = group["overrides"][2]["opd"]
    n = len(group["tokens"][2])
    start, _ = opd["turn_spans"][-1]
    opd["turn_spans"][-1] = [start, n + 4]
    opd["turns"][-1]["span"] = [start, n + 4]
    return 2, start


def plant_wrong_version(group):
    group["overrides"][0]["opd"]["format_version"] = 99
    return 0, None


def plant_missing_opd(group):
    group["overrides"][2] = {}
    return 2, None


def plant_zero_padding(group):
    for seq, rows in enumerate(group["distill_token_ids"]):
        for pos, row in enumerate(rows):
            if not row:
                rows[pos] = [0]
                group["distill_logprobs"][seq][pos] = [0.0]
    return 0, 0


def plant_dense_mismatch(group):
    dense = to_dense_group(group)
    group.clear()
    group.update(dense)
    pos = first_unscored_generated_pos(group, 1)
    group["distill_logprobs"][1][pos] = [group["inference_logprobs"][1][pos] - 0.75]
    return 1, pos


def plant_student_topk_at_prompt(group):
    from hermes_opd.contract.student_topk import make_student_topk_block

    group["overrides"][1]["student_topk"] = make_student_topk_block(2, [0], [[5, 6]], [[-0.1, -2.5]])
    return 1, 0


def plant_prm_advantage_off_carrier(group):
    from hermes_opd.contract.process_reward import ProcessTurn, make_prm_block, process_advantages

    spans = group["overrides"][1]["opd"]["turn_spans"]
    turns = [ProcessTurn(tuple(spans[0]), "scored", -1, True, {"n": 3})]
    turns += [ProcessTurn(tuple(span), "no_next_state") for span in spans[1:]]
    group["overrides"][1]["prm"] = make_prm_block(turns, m=3, backend="rules", at_least_one_effective=True)
    advantages = process_advantages(len(group["tokens"][1]), turns)
    advantages[spans[0][0] + 1] = 1.0
    group["advantages"] = [None, advantages, None]
    return 1, spans[0][0] + 1


def plant_advantages_without_prm(group):
    group["advantages"] = [[0.0] * len(tokens) for tokens in group["tokens"]]
    return 0, None


PLANTERS: dict[str, list[Planter]] = {
    "shape": [plant_row_length_mismatch, plant_row_list_too_short, plant_missing_field],
    "non_finite": [plant_nan],
    "positive_logprob": [plant_positive],
    "unsorted": [plant_unsorted],
    "topk_mass": [plant_topk_mass],
    "student_token_missing": [plant_student_missing],
    "duplicate_id": [plant_duplicate_id],
    "row_at_masked_position": [plant_row_at_masked],
    "unprovenanced_row": [plant_unprovenanced_row],
    "missing_row": [plant_missing_row],
    "span_outside_generated": [plant_span_over_prompt, plant_span_past_end],
    "provenance": [plant_wrong_version, plant_missing_opd],
    "zero_padding": [plant_zero_padding],
    "dense_k1_mismatch": [plant_dense_mismatch],
    "student_topk": [plant_student_topk_at_prompt],
    "process_reward": [plant_prm_advantage_off_carrier, plant_advantages_without_prm],
}


def test_every_violation_kind_has_a_planted_case():
    assert set(PLANTERS) == set(VIOLATION_KINDS)


CASES = [(kind, planter) for kind, planters in PLANTERS.items() for planter in planters]


@pytest.mark.parametrize(("kind", "planter"), CASES, ids=[p.__name__ for _, p in CASES])
def test_planted_violation_is_caught_with_location(tmp_path, capsys, kind, planter):
    groups = [build_group(seed=s) for s in range(3)]
    seq, pos = planter(groups[BROKEN_LINE - 1])
    path = write_jsonl(tmp_path / "groups.jsonl", groups)

    report = validate_jsonl(path)

    assert report.violations_by_kind.get(kind, 0) >= 1, report.to_dict()
    located = {(v.kind, v.line, v.group, v.seq, v.pos) for v in report.first_violations}
    assert (kind, BROKEN_LINE, BROKEN_LINE - 1, seq, pos) in located, report.to_dict()
    assert main([str(path)]) == 1
    captured = capsys.readouterr()
    summary = json.loads(captured.out)
    assert summary["clean"] is False and summary["violations_by_kind"][kind] >= 1
    assert f"[{kind}]" in captured.err


def test_clean_file_exits_zero_with_counts(tmp_path, capsys):
    groups = [build_group(seed=s, group_size=2) for s in range(4)]
    path = write_jsonl(tmp_path / "clean.jsonl", groups)
    assert main([str(path)]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["clean"] is True
    assert summary["groups"] == 4 and summary["sequences"] == 8
    assert summary["positions"] == sum(len(t) for g in groups for t in g["tokens"])
    expected_scored = sum(sum(1 for row in rows if row) for g in groups for rows in g["distill_token_ids"])
    assert summary["positions_scored"] == expected_scored > 0
    expected_turns = sum(
        turn["status"] == "scored" for g in groups for o in g["overrides"] for turn in o["opd"]["turns"]
    )
    assert summary["turns_scored"] == expected_turns == 8 * 2  # group_size 2: both sequences score 2 turns
    assert summary["violations_by_kind"] == {} and summary["first_violations"] == []


def test_wrapped_groups_and_blank_lines_and_dense_mode(tmp_path):
    path = write_jsonl(
        tmp_path / "wrapped.jsonl", [build_group(seed=1), to_dense_group(build_group(seed=2))], wrap=True
    )
    with open(path, "a", encoding="utf-8") as handle:
        handle.write("\n   \n")
    report = validate_jsonl(path)
    assert report.clean, report.to_dict()
    assert report.groups == 2


def test_broken_json_line_exits_two_and_names_the_line(tmp_path, capsys):
    path = tmp_path / "broken.jsonl"
    lines = [
        json.dumps(build_group(seed=0)),
        json.dumps(build_group(seed=1)),
        '{"tokens": [[1, 2]',
        "[1, 2, 3]",
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert main([str(path)]) == 2
    captured = capsys.readouterr()
    summary = json.loads(captured.out)
    assert summary["groups"] == 2
    assert [item["line"] for item in summary["invalid_lines"]] == [3, 4]
    assert "line 3: invalid JSON" in captured.err
    assert "line 4: a JSON list, not an object" in captured.err


def test_unreadable_file_exits_two(tmp_path, capsys):
    assert main([str(tmp_path / "missing.jsonl")]) == 2
    assert "cannot read" in capsys.readouterr().err


def test_json_nan_and_infinity_literals_are_non_finite(tmp_path):
    group = build_group(seed=5)
    pos = first_scored_pos(group, 0)
    group["distill_logprobs"][0][pos][0] = -math.inf
    path = write_jsonl(tmp_path / "inf.jsonl", [group])
    assert "-Infinity" in path.read_text()
    report = validate_jsonl(path)
    assert report.violations_by_kind.get("non_finite") == 1
    assert (report.first_violations[0].seq, report.first_violations[0].pos) == (0, pos)
