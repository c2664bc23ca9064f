"""Hint choice among the accepted votes' hints (`JudgeConfig.hint_choice`), pure logic.

Every policy gives each candidate a score, a short list of numbers; the winner is the earliest
candidate with the (lexicographically) largest score (`best_candidate`, in the contract).
Provenance records the candidates, their scores and the winner, so a reviewer re-derives the
choice with `best_candidate` alone.

Text-only policies (no teacher call):
- `representative` (default): [mean word-set Jaccard with the other hints, distinct words]
  (judge/votes.py explains why);
- `longest`: [characters], the reference behaviour;
- `shortest`: [-characters].

Teacher policies (each candidate's teacher rows for the turn are needed; environments/pipeline scores
every candidate):
- `teacher_overlap` (OpenClaw-RL's `sequence_optimal`): [sum over the turn's positions of
  |teacher top-K ids & student top-K ids|];
- `token_optimal`: [positions where this candidate's overlap is the best of all candidates (ties
  count for each), then the overlap sum]. OpenClaw-RL's `token_optimal` picks per token; here one
  hint per turn is kept, so the turn's rows still come from ONE teacher input and stay re-derivable
  from provenance.

Bias, stated plainly: the teacher policies prefer the hint under which the teacher agrees most
with what the student already does, i.e. the smallest correction. A hint that fixes a real mistake
moves the teacher away from the student and scores lower. The student's top-K comes from the
sampler when the env records it; otherwise the sampled token alone stands for it (K = 1).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from hermes_opd.contract.provenance import best_candidate
from judge.votes import representativeness, word_set

TEXT_POLICIES = ("representative", "longest", "shortest")
TEACHER_POLICIES = ("teacher_overlap", "token_optimal")

__all__ = ["HintSelection", "best_candidate", "select_by_teacher", "select_by_text", "teacher_scores"]


def text_scores(hints: Sequence[str], policy: str) -> list[list[float]]:
    """Scores of a text-only policy (see the module docstring)."""
    if policy == "representative":
        overlap = representativeness(hints)
        return [[round(overlap[i], 9), float(len(word_set(h)))] for i, h in enumerate(hints)]
    if policy == "longest":
        return [[float(len(h))] for h in hints]
    if policy == "shortest":
        return [[-float(len(h))] for h in hints]
    raise ValueError(f"{policy!r} is not a text-only hint choice; use one of {TEXT_POLICIES}")


def position_overlaps(
    teacher_ids_rows: Sequence[Sequence[int]], student_topk_rows: Sequence[Sequence[int]], k: int
) -> list[int]:
    """|teacher top-k ids & student top-K ids| at each position of the turn. A teacher row is its
    top-k ids first (the student's own token may follow it, outside the top-k; it is not counted)."""
    if len(teacher_ids_rows) != len(student_topk_rows):
        raise ValueError(f"{len(teacher_ids_rows)} teacher rows for {len(student_topk_rows)} student rows")
    return [len(set(t[:k]) & set(s)) for t, s in zip(teacher_ids_rows, student_topk_rows, strict=True)]


def teacher_scores(
    candidate_rows: Sequence[Sequence[Sequence[int]]],
    student_topk_rows: Sequence[Sequence[int]],
    k: int,
    policy: str,
) -> list[list[float]]:
    """Scores of a teacher policy from each candidate's teacher id rows over the same turn."""
    overlaps = [position_overlaps(rows, student_topk_rows, k) for rows in candidate_rows]
    sums = [float(sum(o)) for o in overlaps]
    if policy == "teacher_overlap":
        return [[s] for s in sums]
    if policy == "token_optimal":
        best = [max(column) for column in zip(*overlaps, strict=True)] if overlaps else []
        won = [float(sum(o == b for o, b in zip(own, best, strict=True))) for own in overlaps]
        return [[w, s] for w, s in zip(won, sums, strict=True)]
    raise ValueError(f"{policy!r} is not a teacher hint choice; use one of {TEACHER_POLICIES}")


@dataclass(frozen=True)
class HintSelection:
    """A choice among candidate hints, as provenance records it."""

    policy: str
    candidates: list[str]
    scores: list[list[float]]
    winner: int
    student_k: int | None = None
    """Teacher policies: K of the student's top-K rows the overlaps used (1: the sampled token only)."""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def hint(self) -> str:
        return self.candidates[self.winner]

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "policy": self.policy,
            "candidates": list(self.candidates),
            "scores": [list(s) for s in self.scores],
            "winner": self.winner,
        }
        if self.student_k is not None:
            out["student_k"] = self.student_k
        out.update(self.extra)
        return out


def select_by_text(hints: Sequence[str], policy: str) -> HintSelection:
    scores = text_scores(hints, policy)
    return HintSelection(policy, list(hints), scores, best_candidate(scores))


def select_by_teacher(
    hints: Sequence[str],
    candidate_rows: Sequence[Sequence[Sequence[int]]],
    student_topk_rows: Sequence[Sequence[int]],
    k: int,
    policy: str,
) -> HintSelection:
    if len(hints) != len(candidate_rows):
        raise ValueError(f"{len(candidate_rows)} teacher row sets for {len(hints)} hints")
    scores = teacher_scores(candidate_rows, student_topk_rows, k, policy)
    student_k = max((len(r) for r in student_topk_rows), default=0)
    return HintSelection(policy, list(hints), scores, best_candidate(scores), student_k=student_k)
