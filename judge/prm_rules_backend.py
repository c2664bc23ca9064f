"""Deterministic, offline process-reward judge: +1 / -1 / 0 per turn from plain signals in its next
state (the dev rig's PRM, as judge/rules_backend.py is its hint judge).

The next state's messages are read with their roles (judge/prm_prompt.py, `next_state_parts`), in
this order; the first rule that fires decides:
1. -1, a failure: any finding of the hint rules (judge/rules_backend.py, `find_failures`: a failing
   test, a failed assertion, a traceback, a missing command or path, a tool call the env refused, a
   missing solution file, a non-zero exit code) in a tool output or in user feedback, or a
   checker's count line with fewer tests passed than run (`3/5 tests passed.`) in user feedback;
2. -1, a correction in user feedback: a redo request (`try again`, `do it again`, `redo`), a
   restated request (its word set overlaps an earlier user message's by at least `RESTATE_OVERLAP`,
   Jaccard, with at least `RESTATE_MIN_WORDS` words), or a reply read as a correction
   (judge/user_feedback.py: `no, ...`, `I meant`, `change X to Y`, `that's wrong`, `still fails`,
   `should be`, `could you use ...`, ...);
3. +1, a reply read as an acceptance (`thanks`, `approved`, `works for me`, `spot on`, a reply that
   starts with `yes`/`ok`, ...);
4. 0, anything else: a clean tool output (it shows what the call did, not that it was right), and a
   reply the reader cannot read, which the backend counts (`feedback_tally`,
   judge/user_feedback_tally.py).

Acceptance and correction are read only in user feedback, never in tool output: what a tool prints
is under the policy's control, so `print("thanks, perfect")` earns nothing. The rules are lexical
(English phrasings); they are a dev-rig stand-in for the LLM backend, not a model of every user.
Votes are m identical copies written as a judge answer and read back with `parse_process_vote`, so
they go through the same parser and vote policy as an LLM's.
"""

from __future__ import annotations

import re

from hermes_opd.record.turn_pairs import TurnPair, message_text
from judge.config import JudgeConfig
from judge.parsing import Vote, parse_process_vote
from judge.prm_prompt import next_state_parts
from judge.rules_backend import RulePatterns, find_failures
from judge.user_feedback import read_reply
from judge.user_feedback_tally import FeedbackTally
from judge.votes import jaccard, word_set

RESTATE_OVERLAP = 0.6
RESTATE_MIN_WORDS = 3

_TESTS_PASSED = re.compile(r"(?i)\b(\d+)\s*/\s*(\d+)\s+tests?\s+passed\b")
"""The verifier's count line (environments/rollout/verifier_feedback.py): `3/5 tests passed.`"""


def restates_earlier_request(text: str, pair: TurnPair) -> bool:
    """Whether `text` repeats an earlier user message of the conversation (word-set Jaccard)."""
    words = word_set(text)
    if len(words) < RESTATE_MIN_WORDS:
        return False
    earlier = [word_set(message_text(m)) for m in pair.context_messages if m.get("role") == "user"]
    return any(jaccard(words, other) >= RESTATE_OVERLAP for other in earlier)


def process_verdict(pair: TurnPair, patterns: RulePatterns) -> tuple[int, str]:
    """(score, reason) of the rules above for one turn pair."""
    parts = next_state_parts(pair)
    for role, _, text in parts:
        findings = find_failures(text, patterns)
        if findings:
            return -1, f"failure in the {role} message: {findings[0].kind}"
    feedback = [(text, read_reply(text).kind) for role, _, text in parts if role == "user"]
    for text, reading in feedback:
        counts = [(int(a), int(b)) for a, b in _TESTS_PASSED.findall(text)]
        if any(passed < total for passed, total in counts):
            return -1, "the user's checks report failing tests"
        if reading == "redo":
            return -1, "the user asks for a redo"
        if restates_earlier_request(text, pair):
            return -1, "the user restates an earlier request"
        if reading == "correction":
            return -1, "the user corrects the step"
    if any(reading == "acceptance" for _, reading in feedback):
        return 1, "the user accepts the step"
    return 0, "no clear signal in the next state"


def process_answer(pair: TurnPair, patterns: RulePatterns) -> str:
    """The rules' verdict written as a judge answer."""
    if not pair.has_next_state:
        return "rules: no next state.\n\\boxed{0}"
    score, reason = process_verdict(pair, patterns)
    return f"rules: {reason}.\n\\boxed{{{score}}}"


class ProcessRulesBackend:
    """m identical, deterministic process votes from `process_answer`."""

    name = "rules"

    def __init__(self, config: JudgeConfig) -> None:
        self.config = config
        self.patterns = RulePatterns.from_config(config)
        self.feedback_tally = FeedbackTally()
        """Readings of the user replies it read: an `unread` one scored 0, neither reward nor penalty."""

    async def collect_votes(self, pair: TurnPair) -> list[Vote]:
        if pair.has_next_state:
            self.feedback_tally.record(
                read_reply(text).kind for role, _, text in next_state_parts(pair) if role == "user"
            )
        return [parse_process_vote(process_answer(pair, self.patterns))] * self.config.m

    async def aclose(self) -> None:
        return None
