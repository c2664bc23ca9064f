"""The no-information-words control: the rules judge's hint, on the same turns, with every quoted
value taken out."""

from __future__ import annotations

import asyncio

from judge.config import JudgeConfig
from judge.make_backend import make_judge_backend
from judge.redacted_backend import REDACTED_VALUE, RedactedHintJudgeBackend, redact_quoted
from tests.support.judge_pairs import next_state_pair

MISSING = "Missing solution file(s) (the checker looks for these): utils.py\nexit code 1"
CANNOT_IMPORT = "could not load the solution: ImportError: cannot import name 'compute_quota' from 'utils'"
PASSED = "All 3 tests passed."
VALUES = ("utils", "compute_quota", "quota")


def hints(backend: str, next_state: str | None) -> list[tuple[int, str | None]]:
    votes = asyncio.run(
        make_judge_backend(JudgeConfig(backend=backend, m=3)).collect_votes(next_state_pair(next_state))
    )
    return [(v.score, v.hint) for v in votes]


def test_the_rules_hint_loses_its_values_and_keeps_its_words():
    for state in (MISSING, CANNOT_IMPORT):
        (informed,) = set(hints("rules", state))
        (redacted,) = set(hints("redacted", state))
        assert informed[0] == redacted[0] == 1
        assert any(value in informed[1] for value in VALUES)
        assert not any(value in redacted[1] for value in VALUES), redacted[1]
        assert REDACTED_VALUE in redacted[1] and "`" not in redacted[1]
        # the same sentence around the values: only the quoted spans differ
        assert redacted[1] == redact_quoted(informed[1])


def test_the_same_turns_are_hinted_as_under_the_rules_judge():
    assert hints("redacted", PASSED) == hints("rules", PASSED) == [(-1, None)] * 3
    assert hints("redacted", None) == [(-1, None)] * 3
    assert isinstance(make_judge_backend(JudgeConfig(backend="redacted")), RedactedHintJudgeBackend)


def test_fenced_blocks_and_inline_spans_are_both_values():
    text = "Run `pytest -q` then:\n```python\nfrom utils import f\n```\nand `x`."
    assert redact_quoted(text) == f"Run {REDACTED_VALUE} then:\n{REDACTED_VALUE}\nand {REDACTED_VALUE}."
    assert redact_quoted("no quotes here") == "no quotes here"
