"""The no-information-words control: the rules judge's own hint with every value it quotes removed.

The constant control (judge/constant_backend.py) changes the whole sentence. This one keeps the
sentence, its direction and its length class, and takes out only what it states: each span the hint
quotes in backticks (a file, a name, a module, a quoted line of code) becomes `REDACTED_VALUE`. "The
checker looks for `utils.py`, and that file does not exist. Write the solution to `utils.py`." is
given as "The checker looks for the expected name, and that file does not exist. Write the solution
to the expected name." A gain that appears with the rules hint and not with this one came from the
quoted value, not from being told that something went wrong, or where.

Used as `JudgeConfig.backend: redacted` (env key `judge_backend: redacted`). The hinted turns are
exactly the rules backend's; votes are m identical copies read back with `parse_vote`.
"""

from __future__ import annotations

import re

from hermes_opd.record.turn_pairs import TurnPair
from judge.config import JudgeConfig
from judge.parsing import HINT_END, HINT_START, Vote, defuse_markers, parse_vote
from judge.rules_backend import RulePatterns, pair_hint

REDACTED_VALUE = "the expected name"
"""What each quoted value becomes: words that say a name is meant, not which."""

_QUOTED = re.compile(r"```.*?```|`[^`\n]*`", re.DOTALL)
"""A fenced block or an inline code span: the only places the rules judge writes a value."""


def redact_quoted(hint: str) -> str:
    """The hint with every backtick-quoted span replaced by `REDACTED_VALUE`."""
    return _QUOTED.sub(REDACTED_VALUE, hint)


def redacted_answer(pair: TurnPair, patterns: RulePatterns) -> str:
    """The rules judge's verdict, its hint redacted, written as a judge answer."""
    hint = pair_hint(pair, patterns)
    if hint is None:
        return "redacted: no failure signal in the next state.\n\\boxed{-1}"
    text = defuse_markers(redact_quoted(hint))
    return f"redacted: failure signal in the next state.\n\\boxed{{1}}\n{HINT_START}{text}{HINT_END}"


class RedactedHintJudgeBackend:
    """m identical votes from `redacted_answer`."""

    name = "redacted"

    def __init__(self, config: JudgeConfig) -> None:
        self.config = config
        self.patterns = RulePatterns.from_config(config)

    async def collect_votes(self, pair: TurnPair) -> list[Vote]:
        vote = parse_vote(redacted_answer(pair, self.patterns), self.config.min_hint_chars)
        return [vote] * self.config.m

    async def aclose(self) -> None:
        return None
