"""What a user's reply says about the step before it, read lexically (English phrasings): a redo
request, a correction, or an acceptance. The rules backends read it only in `role: user` messages,
never in tool output, which the policy controls: the process judge (judge/prm_rules_backend.py) for
its +1 / -1, and the hint judge (judge/rules_backend.py, `rules_quote_user_feedback`) to quote a
reply that is not a plain acceptance. A dev-rig stand-in for the LLM backends, not a model of every
user."""

from __future__ import annotations

import re

REDO = re.compile(r"(?i)\b(?:try again|do it again|redo|start over|one more time|again, please)\b")
CORRECTION = re.compile(
    r"(?i)(?:^\s*no\b|\bnot (?:exactly |quite )?what i (?:asked|meant|wanted|said)\b|\bi meant\b|\bi said\b|"
    r"\bthat(?:'s| is| was)? (?:wrong|incorrect|not right|not it)\b|\bwrong\b|\bincorrect\b|"
    r"\bnot (?:correct|right)\b|\bchange\b[^.\n]*\bto\b|\brename\b|\binstead\b|\bshould (?:be|have|use)\b|"
    r"\bplease (?:fix|use|call|name)\b|\bdoesn't work\b|\bdoes not work\b|\bdidn't work\b|\bbroken\b)"
)
ACCEPTANCE = re.compile(
    r"(?i)(?:\bthanks?\b|\bthank you\b|\bperfect\b|\bgreat\b|\blooks good\b|\blgtm\b|\bthat works\b|"
    r"\bworks now\b|\bwell done\b|\bgood job\b|\bnice\b|\bexactly\b|\bcorrect\b|\baccepted\b|"
    r"^\s*(?:yes|ok|okay)\b)"
)


def asks_for_redo(text: str) -> bool:
    return REDO.search(text) is not None


def corrects(text: str) -> bool:
    return CORRECTION.search(text) is not None


def accepts(text: str) -> bool:
    """An acceptance phrase, whatever else the reply says (callers check corrections first)."""
    return ACCEPTANCE.search(text) is not None


def plain_acceptance(text: str) -> bool:
    """An acceptance with no redo request and no correction in it: nothing to learn from its words."""
    return accepts(text) and not asks_for_redo(text) and not corrects(text)
