"""`hermes-opd student-eval`'s report: success with and without a hint, and which convention moved."""

from __future__ import annotations

from hermes_opd.learning_study.hint_following import Attempt, HintReport


def attempt(task: str, hinted: bool, passed: bool, convention: str | None, followed: bool | None) -> Attempt:
    return Attempt(
        task_id=task,
        hinted=hinted,
        passed=passed,
        parsed_call=True,
        written=None,
        convention=convention,
        followed=followed,
    )


def test_the_summary_counts_which_convention_each_attempt_followed_with_and_without_the_hint():
    report = HintReport(temperature=0.0, samples=1)
    report.attempts = [
        attempt("convention-heldout-module-quota", False, False, "utils.py", False),
        attempt("convention-heldout-module-quota", True, True, "helpers.py", True),
        attempt("convention-heldout-module-bonus", False, True, "helpers.py", True),
        attempt("convention-heldout-name-quota", False, False, "get", False),
        attempt("convention-heldout-name-quota", True, False, "other", False),
        attempt("humaneval-1", False, True, None, None),  # another family: not counted
    ]
    summary = report.summary()
    assert summary["conventions"] == {
        "no_hint": {
            "name": {"attempts": 1, "followed": 0, "chosen": {"get": 1}},
            "module": {"attempts": 2, "followed": 1, "chosen": {"helpers.py": 1, "utils.py": 1}},
        },
        "hint": {
            "name": {"attempts": 1, "followed": 0, "chosen": {"other": 1}},
            "module": {"attempts": 1, "followed": 1, "chosen": {"helpers.py": 1}},
        },
    }
    assert summary["hint_success_by_kind"] == {"name": 0.0, "module": 1.0}
