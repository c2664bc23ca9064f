"""Checks on an exception's message and on decoded reports: exact, whole-word, and linear in cost."""

from __future__ import annotations

import pytest

from environments.tasks.builtin import builtin_tasks
from environments.tasks.suite_format import (
    MalformedResult,
    decode_value,
    judge_test,
    message_contains_word,
    message_matches,
    parse_suite,
)


def _suite(check: dict) -> dict:
    return {"tests": [{"name": "t", "checks": [{"expr": "f()", "raises": "ValueError", **check}]}]}


def _raised(message: str) -> dict:
    return {"checks": [{"raised": ["ValueError", "Exception"], "message": message}]}


def test_every_match_must_capture_the_expected_value_as_a_whole_word():
    pattern = r"position (\d+)"
    assert message_matches("unexpected '$' at position 4", pattern, ("4",))
    assert not message_matches("position 4 or position 5", pattern, ("4",))
    assert not message_matches(" ".join(f"position {i}" for i in range(10)), pattern, ("0",))
    assert not message_matches("at position 45", pattern, ("4",))
    assert not message_matches("no position given", pattern, ("4",))
    assert message_matches("cycle among: a, b", r"\b([a-d])\b", ("a", "b", "c"))
    assert not message_matches("cycle among: a, b, d", r"\b([a-d])\b", ("a", "b", "c"))
    assert not message_matches("xa", r"(x)", ("x",))  # the capture is part of a longer word


def test_message_contains_is_whole_word():
    assert message_contains_word("cycle at 'x'", "x")
    assert not message_contains_word("cycle exists", "x")
    assert message_contains_word("bad key: user id", "user id")


def test_the_judge_uses_the_exact_check():
    suite = parse_suite(_suite({"message_match": {"pattern": r"position (\d+)", "equals": "2"}}))
    (test,) = suite.tests
    assert judge_test(test, _raised("malformed number at position 2")) == (True, "")
    passed, why = judge_test(test, _raised("position 1, position 2, position 3"))
    assert not passed and "states the right value" in why


@pytest.mark.parametrize(
    ("spec", "error"),
    [
        ({"pattern": r"position \d+", "equals": "1"}, "exactly one capture group"),
        ({"pattern": r"(a)(b)", "equals": "1"}, "exactly one capture group"),
        ({"pattern": r"(", "equals": "1"}, "does not compile"),
        ({"pattern": r"(a)", "equals": []}, "equals must be"),
        ({"pattern": r"(a)"}, "must be {"),
    ],
)
def test_bad_message_match_specs_are_refused(spec, error):
    with pytest.raises(ValueError, match=error):
        parse_suite(_suite({"message_match": spec}))


def test_no_builtin_task_checks_a_message_by_substring():
    for task in builtin_tasks():
        if not task.data_tests:
            continue
        for test in parse_suite(task.hidden_tests).tests:
            for check in test.checks:
                assert check.message_contains is None, (task.task_id, test.name)


def test_a_set_of_colliding_hashes_is_refused_before_a_set_is_built():
    colliding = [i * (2**61 - 1) for i in range(1, 40_001)]
    for tag in ("$set", "$frozenset"):
        with pytest.raises(MalformedResult, match="share one hash value"):
            decode_value({tag: colliding})
    with pytest.raises(MalformedResult, match="share one hash value"):
        decode_value({"$dict": [[k, 0] for k in colliding]})
    assert decode_value({"$set": [-1, -2, 3]}) == {-1, -2, 3}  # a few shared hashes are fine
    with pytest.raises(MalformedResult, match="unhashable"):
        decode_value({"$set": [[1]]})
