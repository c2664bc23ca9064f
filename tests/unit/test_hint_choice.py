"""Hint choice policies on hand-made rows (judge/hint_choice.py), and the provenance that re-derives
the chosen hint (hermes_opd/contract/provenance.py)."""

from __future__ import annotations

import pytest

from hermes_opd.contract.provenance import best_candidate, rederive_hint, turn_provenance
from judge.hint_choice import position_overlaps, select_by_teacher, select_by_text, teacher_scores
from judge.parsing import Vote
from judge.votes import decide_votes

HINTS = ["Run the tests first.", "Check the file path before opening it.", "Check the path."]


def test_text_policies_by_hand():
    assert select_by_text(HINTS, "longest").winner == 1
    assert select_by_text(HINTS, "shortest").winner == 2
    rep = select_by_text(HINTS, "representative")
    # Jaccard of the word sets: (0, 1) = 1/10, (0, 2) = 1/6, (1, 2) = 3/7; mean with the others:
    assert [sc[0] for sc in rep.scores] == pytest.approx(
        [(1 / 10 + 1 / 6) / 2, (1 / 10 + 3 / 7) / 2, (1 / 6 + 3 / 7) / 2]
    )
    assert rep.winner == 2
    assert rep.hint == decide_votes([Vote(1, h, "") for h in HINTS], "any", "representative").hint


def test_position_overlaps_count_only_the_teacher_top_k():
    teacher = [[5, 6, 7, 99], [1, 2, 3]]  # 99: the student's own token appended outside the top-3
    student = [[99, 5], [2, 3]]
    assert position_overlaps(teacher, student, k=3) == [1, 2]
    with pytest.raises(ValueError, match="2 teacher rows for 1 student rows"):
        position_overlaps(teacher, student[:1], k=3)


def test_teacher_overlap_and_token_optimal_by_hand():
    student = [[1, 2], [3, 4], [5, 6]]
    candidates = [
        [[1, 2, 9], [9, 8, 7], [9, 8, 7]],  # overlaps 2, 0, 0: sum 2, best at position 0
        [[1, 9, 8], [3, 9, 8], [5, 9, 8]],  # overlaps 1, 1, 1: sum 3, best at positions 1 and 2
        [[9, 8, 7], [3, 4, 8], [9, 8, 7]],  # overlaps 0, 2, 0: sum 2, best at position 1
    ]
    assert teacher_scores(candidates, student, 3, "teacher_overlap") == [[2.0], [3.0], [2.0]]
    assert teacher_scores(candidates, student, 3, "token_optimal") == [[1.0, 2.0], [1.0, 3.0], [1.0, 2.0]]
    hints = ["a hint", "b hint", "c hint"]
    chosen = select_by_teacher(hints, candidates, student, 3, "teacher_overlap")
    assert (chosen.winner, chosen.hint, chosen.student_k) == (1, "b hint", 2)
    # The two policies disagree: A is best at two positions with a smaller sum, B at one with a larger.
    student = [[1, 2, 3], [4, 5, 6], [7, 8, 9]]
    a = [[1, 90, 91], [4, 90, 91], [90, 91, 92]]  # overlaps 1, 1, 0
    b = [[90, 91, 92], [90, 91, 92], [7, 8, 9]]  # overlaps 0, 0, 3
    assert select_by_teacher(["A", "B"], [a, b], student, 3, "teacher_overlap").hint == "B"
    token = select_by_teacher(["A", "B"], [a, b], student, 3, "token_optimal")
    assert (token.hint, token.scores) == ("A", [[2.0, 2.0], [1.0, 3.0]])


def test_ties_go_to_the_earlier_candidate():
    assert best_candidate([[1.0, 2.0], [1.0, 2.0]]) == 0
    assert best_candidate([[1.0, 2.0], [1.0, 3.0]]) == 1
    with pytest.raises(ValueError, match="no candidates"):
        best_candidate([])


def test_provenance_rederives_the_choice_and_catches_a_forged_winner():
    chosen = select_by_teacher(["x fix", "y fix"], [[[1]], [[2]]], [[2]], 1, "teacher_overlap")
    entry = turn_provenance((3, 5), 1, "scored", hint=chosen.hint, hint_selection=chosen.as_dict())
    assert rederive_hint(entry) == entry["hint"] == "y fix"
    assert entry["hint_selection"]["scores"] == [[0.0], [1.0]]
    forged = turn_provenance(
        (3, 5), 1, "scored", hint=chosen.hint, hint_selection={**chosen.as_dict(), "winner": 0}
    )
    with pytest.raises(ValueError, match="records winner 0; its scores select 1"):
        rederive_hint(forged)
    assert rederive_hint({"status": "no_hint"}) is None


def test_decide_keeps_every_accepted_hint_as_a_candidate():
    votes = [Vote(1, "alpha fix", ""), Vote(-1, None, ""), Vote(1, "beta fix", ""), Vote(1, "alpha fix", "")]
    outcome = decide_votes(votes, "majority", "teacher_overlap")
    assert outcome.candidates == ("alpha fix", "beta fix", "alpha fix")
    assert outcome.hint == "alpha fix"  # provisional (representative) until the teacher scores them
    assert decide_votes(votes[:2], "majority", "shortest").candidates == ()  # not accepted: no candidates
