"""Vote policies: from m parsed votes to one decision and at most one hint (pure logic).

Policies
- `majority` (default): accept when MORE than half of the parseable votes are +1, and at least one
  vote parsed. Unparsed votes (garbage text, failed requests) are left out of the denominator: they
  are missing evidence, not votes against.
- `any`: the reference behaviour, kept for comparison: one +1 vote with a valid hint wins.

In both policies a +1 vote without a usable hint still counts as +1 (the judge did say the turn could
be better), but only +1 votes WITH a hint can supply the hint; a positive decision with no hint at
all is not accepted, since there is nothing to give the teacher.

Hint choice among the +1 votes that have a hint
- `longest`: the reference behaviour.
- `representative`: the hint whose lowercased word set has the highest mean Jaccard overlap with
  the other candidates' word sets, i.e. the one that best states what the judges agree on. Ties go
  to the SHORTER hint (same content, fewer words for the teacher to misread), then to the earlier
  vote, so the choice is deterministic. With one or two candidates every score is equal, so the
  shorter one wins.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from judge.config import HintChoiceName, VotePolicyName
from judge.parsing import Vote

_WORD = re.compile(r"\w+")


@dataclass(frozen=True)
class VoteOutcome:
    """The decision for one turn, with the counts behind it."""

    accepted: bool
    hint: str | None
    n: int
    positive: int
    negative: int
    unparsed: int
    policy: str
    agreement: float
    """Share of the parseable votes that went the way the outcome went: positive/parseable when
    accepted, negative/parseable when not; 0.0 when no vote parsed."""
    hint_choice: str = "representative"
    positive_with_hint: int = 0

    def as_dict(self) -> dict[str, Any]:
        """Vote summary for provenance JSON (the hint itself is stored beside it, not in here)."""
        return {
            "n": self.n,
            "positive": self.positive,
            "negative": self.negative,
            "unparsed": self.unparsed,
            "policy": self.policy,
            "accepted": self.accepted,
            "agreement": round(self.agreement, 4),
            "hint_choice": self.hint_choice,
            "positive_with_hint": self.positive_with_hint,
        }


def word_set(text: str) -> frozenset[str]:
    return frozenset(_WORD.findall(text.lower()))


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    """|a & b| / |a | b|; 0.0 when both are empty."""
    union = a | b
    if not union:
        return 0.0
    return len(a & b) / len(union)


def choose_longest(hints: Sequence[str]) -> str:
    """The longest hint; the earliest among equals."""
    return max(enumerate(hints), key=lambda item: (len(item[1]), -item[0]))[1]


def representativeness(hints: Sequence[str]) -> list[float]:
    """For each hint, its mean Jaccard word-set overlap with every other hint (0.0 if alone)."""
    sets = [word_set(h) for h in hints]
    scores = []
    for i, own in enumerate(sets):
        others = [jaccard(own, other) for j, other in enumerate(sets) if j != i]
        scores.append(sum(others) / len(others) if others else 0.0)
    return scores


def choose_representative(hints: Sequence[str]) -> str:
    """Highest mean overlap with the others; ties -> shorter, then earlier (see module docstring)."""
    scores = representativeness(hints)
    best = min(range(len(hints)), key=lambda i: (-round(scores[i], 9), len(hints[i]), i))
    return hints[best]


def choose_hint(hints: Sequence[str], hint_choice: HintChoiceName) -> str | None:
    if not hints:
        return None
    if hint_choice == "longest":
        return choose_longest(hints)
    if hint_choice == "representative":
        return choose_representative(hints)
    raise ValueError(f"unknown hint choice {hint_choice!r}")


def decide(
    votes: Sequence[Vote], policy: VotePolicyName = "majority", hint_choice: HintChoiceName = "representative"
) -> VoteOutcome:
    """Apply a vote policy and a hint choice to parsed votes."""
    positive = sum(1 for v in votes if v.score == 1)
    negative = sum(1 for v in votes if v.score == -1)
    parseable = positive + negative
    unparsed = len(votes) - parseable
    hints = [v.hint for v in votes if v.score == 1 and v.hint]

    if policy == "majority":
        decided_positive = parseable > 0 and 2 * positive > parseable
    elif policy == "any":
        decided_positive = bool(hints)
    else:
        raise ValueError(f"unknown vote policy {policy!r}")

    hint = choose_hint(hints, hint_choice) if decided_positive else None
    accepted = hint is not None
    agreement = 0.0 if parseable == 0 else (positive if accepted else negative) / parseable
    return VoteOutcome(
        accepted=accepted,
        hint=hint,
        n=len(votes),
        positive=positive,
        negative=negative,
        unparsed=unparsed,
        policy=policy,
        agreement=agreement,
        hint_choice=hint_choice,
        positive_with_hint=len(hints),
    )
