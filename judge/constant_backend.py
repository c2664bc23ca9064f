"""The uninformative-hint control: the same sentence on every hinted turn, whatever went wrong.

A learning result that claims the hint's information moved the student must not appear when the hint
carries none. This backend is that control, as a real judge backend (`JudgeConfig.backend:
constant`, env key `judge_backend: constant`): it accepts exactly the turns that
`constant_hint_turns` names and gives each the hint `constant_hint` (default "Check your work
carefully."):

- `failed`: the turns the `rules` backend would hint (a failure signal in the next state,
  judge/rules_backend.py), so the hinted turns, and the OPD rows they produce, are the same as with
  `rules` and only the hint's text differs;
- `every`: every turn that has a next state, successful ones included.

Votes are m identical copies written in the judge's answer format and read back with `parse_vote`,
like the rules backend's.
"""

from __future__ import annotations

from hermes_opd.record.turn_pairs import TurnPair
from judge.config import JudgeConfig
from judge.parsing import HINT_END, HINT_START, Vote, defuse_markers, parse_vote
from judge.rules_backend import RulePatterns, pair_hint


def hints_turn(pair: TurnPair, turns: str, patterns: RulePatterns) -> bool:
    """Whether the control hints this turn: it has a next state, and (`failed`) that state shows a
    failure signal (or, with `rules_quote_user_feedback`, a user reply) the rules judge would hint."""
    if not pair.has_next_state:
        return False
    return turns == "every" or pair_hint(pair, patterns) is not None


def constant_answer(pair: TurnPair, config: JudgeConfig, patterns: RulePatterns) -> str:
    """The control's verdict written as a judge answer."""
    if not hints_turn(pair, config.constant_hint_turns, patterns):
        return "constant: this turn is not hinted.\n\\boxed{-1}"
    hint = defuse_markers(config.constant_hint)
    return f"constant: hinted turn.\n\\boxed{{1}}\n{HINT_START}{hint}{HINT_END}"


class ConstantHintJudgeBackend:
    """m identical votes from `constant_answer`."""

    name = "constant"

    def __init__(self, config: JudgeConfig) -> None:
        self.config = config
        self.patterns = RulePatterns.from_config(config)

    async def collect_votes(self, pair: TurnPair) -> list[Vote]:
        vote = parse_vote(constant_answer(pair, self.config, self.patterns), self.config.min_hint_chars)
        return [vote] * self.config.m

    async def aclose(self) -> None:
        return None
