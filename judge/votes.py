"""Vote policies: from m parsed votes to one decision and at most one hint (pure logic).

Policies
- `majority` (default): accept when at least `quorum` of the m votes REQUESTED are +1; the default
  quorum is a strict majority, m // 2 + 1 (2 of 3, 3 of 4). A failed request or an unparsed answer
  counts as not-yes: when two of three judge calls time out, the one remaining +1 is not a majority.
- `majority_of_parsed`: the earlier rule, kept for comparison: accept when more than half of the
  parseable votes are +1 (unparsed and failed votes are left out of the denominator, so 1 of 3
  wins when the other two failed).
- `any`: the reference behaviour: one +1 vote with a valid hint wins.

In every policy a +1 vote without a usable hint still counts as +1 (the judge did say the turn could
be better), but only +1 votes WITH a hint can supply the hint; a positive decision with no hint at
all is not accepted, since there is nothing to give the teacher.

Process votes (the PRM judge, judge/prm_prompt.py): `decide_process_votes` counts +1, -1 and 0
verdicts with the same `majority` rule (of the m requested, failed votes count for nothing) and gives
the verdict that has it, else 0: a tie is 0.

Hint choice among the +1 votes that have a hint
- `longest`: the reference behaviour (longest in characters).
- `representative` (default): the hint whose lowercased word set has the highest mean Jaccard
  overlap with the other candidates' word sets, i.e. the one that best states what the judges
  agree on. Ties (with two candidates the scores are always equal, by symmetry) go to the hint with
  MORE distinct words, then to the earlier vote. Distinct words, not characters: padding such as
  "Run tests.!!!!!!" or a repeated phrase adds nothing, while a hint that names the file, the
  command and the fix does. The choice is deterministic, and it never prefers the shorter of two
  hints by construction.
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
    failed: int = 0
    """Of the `unparsed` votes, those whose request failed (no text came back)."""
    requested: int | None = None
    """m, the votes asked for (None: taken to be `n`)."""
    quorum: int | None = None
    """+1 votes needed under `majority`; None for the other policies."""
    candidates: tuple[str, ...] = ()
    """The hints of the +1 votes, in vote order (repeats kept: agreement counts for `representative`)."""

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
            "failed": self.failed,
            "requested": self.n if self.requested is None else self.requested,
            "quorum": self.quorum,
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
    """Highest mean overlap with the others; ties -> more distinct words, then earlier (see the
    module docstring)."""
    scores = representativeness(hints)
    best = min(range(len(hints)), key=lambda i: (-round(scores[i], 9), -len(word_set(hints[i])), i))
    return hints[best]


def strict_majority(m: int) -> int:
    """The smallest number of votes that is more than half of m."""
    return m // 2 + 1


def choose_hint(hints: Sequence[str], hint_choice: HintChoiceName) -> str | None:
    """The hint of a text policy. The teacher policies (judge/hint_choice.py) need the teacher's rows
    of every candidate: here they provisionally take `representative`, and the pipeline replaces
    the choice once it has scored the candidates."""
    if not hints:
        return None
    if hint_choice == "longest":
        return choose_longest(hints)
    if hint_choice == "shortest":
        return min(enumerate(hints), key=lambda item: (len(item[1]), item[0]))[1]
    if hint_choice in ("representative", "teacher_overlap", "token_optimal"):
        return choose_representative(hints)
    raise ValueError(f"unknown hint choice {hint_choice!r}")


def decide_votes(
    votes: Sequence[Vote],
    policy: VotePolicyName = "majority",
    hint_choice: HintChoiceName = "representative",
    *,
    requested: int | None = None,
    quorum: int | None = None,
) -> VoteOutcome:
    """Apply a vote policy and a hint choice to parsed votes.

    `requested` is m, the number of votes asked for (default: `len(votes)`); votes that never came
    back count as not-yes. `quorum` is the number of +1 votes `majority` needs (default: a strict
    majority of `requested`)."""
    m = len(votes) if requested is None else requested
    if m < len(votes):
        raise ValueError(f"{len(votes)} votes for {m} requested")
    positive = sum(1 for v in votes if v.score == 1)
    negative = sum(1 for v in votes if v.score == -1)
    parseable = positive + negative
    unparsed = len(votes) - parseable
    failed = sum(1 for v in votes if v.failed)
    hints = [v.hint for v in votes if v.score == 1 and v.hint]
    candidates = tuple(hints)

    needed: int | None = None
    if policy == "majority":
        needed = strict_majority(m) if quorum is None else quorum
        if not 1 <= needed <= max(m, 1):
            raise ValueError(f"quorum must be between 1 and m={m}, got {needed}")
        decided_positive = m > 0 and positive >= needed
    elif policy == "majority_of_parsed":
        decided_positive = parseable > 0 and 2 * positive > parseable
    elif policy == "any":
        decided_positive = bool(hints)
    else:
        raise ValueError(f"unknown vote policy {policy!r}")

    hint = choose_hint(list(candidates), hint_choice) if decided_positive else None
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
        failed=failed,
        requested=m,
        quorum=needed,
        candidates=candidates if accepted else (),
    )


@dataclass(frozen=True)
class ProcessOutcome:
    """The process-reward decision for one turn: +1, -1 or 0, with the counts behind it."""

    score: int
    n: int
    positive: int
    negative: int
    neutral: int
    unparsed: int
    failed: int
    requested: int
    policy: str
    quorum: int | None
    tie: bool
    """True when two verdicts had the most votes each (so none won), or, with a quorum below a
    strict majority, when two reached it."""

    def as_dict(self) -> dict[str, Any]:
        """Vote summary for provenance JSON (`overrides[seq]["prm"]["turns"][k]["votes"]`)."""
        return {
            "n": self.n,
            "requested": self.requested,
            "positive": self.positive,
            "negative": self.negative,
            "neutral": self.neutral,
            "unparsed": self.unparsed,
            "failed": self.failed,
            "policy": self.policy,
            "quorum": self.quorum,
            "tie": self.tie,
            "score": self.score,
        }


def decide_process_votes(
    votes: Sequence[Vote],
    policy: VotePolicyName = "majority",
    *,
    requested: int | None = None,
    quorum: int | None = None,
) -> ProcessOutcome:
    """The process score of m votes of +1 / -1 / 0: the verdict with a strict majority, else 0.

    `majority` (default): a verdict needs at least `quorum` of the m votes REQUESTED (default
    `strict_majority(m)`; a failed or unparsed vote counts for no verdict), as in `decide_votes`.
    `majority_of_parsed`: more than half of the votes that parsed. With no such verdict the score
    is 0 (a tie, e.g. one +1, one -1 and one 0, or two +1 and two -1, gives 0). `any` has no meaning
    for a three-way verdict and is refused."""
    m = len(votes) if requested is None else requested
    if m < len(votes):
        raise ValueError(f"{len(votes)} votes for {m} requested")
    counts = {s: sum(1 for v in votes if v.score == s) for s in (1, -1, 0)}
    parseable = sum(counts.values())
    needed: int | None = None
    if policy == "majority":
        needed = strict_majority(m) if quorum is None else quorum
        if not 1 <= needed <= max(m, 1):
            raise ValueError(f"quorum must be between 1 and m={m}, got {needed}")
        winners = [s for s, c in counts.items() if m > 0 and c >= needed]
    elif policy == "majority_of_parsed":
        winners = [s for s, c in counts.items() if 2 * c > parseable]
    else:
        raise ValueError(f"vote policy {policy!r} does not decide a process score; use majority")
    top = max(counts.values())
    tie = len(winners) > 1 or (not winners and top > 0 and sum(1 for c in counts.values() if c == top) > 1)
    score = winners[0] if len(winners) == 1 else 0
    return ProcessOutcome(
        score=score,
        n=len(votes),
        positive=counts[1],
        negative=counts[-1],
        neutral=counts[0],
        unparsed=len(votes) - parseable,
        failed=sum(1 for v in votes if v.failed),
        requested=m,
        policy=policy,
        quorum=needed,
        tie=tie,
    )
