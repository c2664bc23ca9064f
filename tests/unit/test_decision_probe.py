"""The pure parts of the decision probe (hermes_opd/learning_study/decision_probe.py): the hints it
scores under, the candidates' span, and the student's own ids kept before the decision."""

from __future__ import annotations

from hermes_opd.learning_study.decision_probe import (
    _common_prefix,
    _common_suffix,
    ids_before,
    rules_hint,
    user_hint,
)


def test_the_hints_state_the_value_as_the_judge_and_the_user_word_it():
    assert rules_hint("module", "utils.py", "revenue") == (
        "The checker looks for `utils.py`, and that file does not exist. Write the solution to `utils.py`."
    )
    assert "`fetch_revenue`" in rules_hint("name", "fetch", "revenue")
    assert "utils.py" in user_hint("module", "utils.py", "revenue", "helpers.py")
    assert "fetch_revenue" in user_hint("name", "fetch", "revenue", "helpers.py")


def test_the_span_where_the_candidates_differ():
    seqs = [[1, 2, 7, 8, 5], [1, 2, 9, 5], [1, 2, 3, 3, 3, 5]]
    start = _common_prefix(seqs)
    assert start == 2 and _common_suffix(seqs, start) == 1


class CharTokenizer:
    def decode(self, ids, **_):
        return "".join(chr(i) for i in ids)


def test_the_students_own_ids_are_kept_up_to_the_decision():
    ids = [ord(c) for c in "def get_x"]
    assert ids_before(CharTokenizer(), ids, 4) == ids[:4]
    assert ids_before(CharTokenizer(), ids, 0) == []
