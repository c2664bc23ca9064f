"""The no-information-words control: the rules judge's hint, on the same turns, with every quoted
value taken out."""

from __future__ import annotations

import asyncio

from hermes_opd.record.trajectory import TurnSpan
from hermes_opd.record.turn_pairs import TurnPair
from judge.config import JudgeConfig
from judge.make_backend import make_judge_backend
from judge.redacted_backend import REDACTED_VALUE, RedactedHintJudgeBackend, redact_quoted

MISSING = "Missing solution file(s) (the checker looks for these): utils.py\nexit code 1"
CANNOT_IMPORT = "could not load the solution: ImportError: cannot import name 'compute_quota' from 'utils'"
PASSED = "All 3 tests passed."
VALUES = ("utils", "compute_quota", "quota")


def pair(next_state: str | None) -> TurnPair:
    return TurnPair(
        turn_index=0,
        span=TurnSpan(start=3, end=9, message_index=2),
        assistant_message={"role": "assistant", "content": "done"},
        context_messages=[{"role": "user", "content": "Write a function."}],
        next_state_role="user" if next_state is not None else None,  # type: ignore[arg-type]
        next_state_text=next_state or "",
    )


def hints(backend: str, next_state: str | None) -> list[tuple[int, str | None]]:
    votes = asyncio.run(make_judge_backend(JudgeConfig(backend=backend, m=3)).collect_votes(pair(next_state)))
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
