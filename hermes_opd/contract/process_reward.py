"""The per-turn process reward (PRM) in Atropos data: `advantages` carries it, `overrides[seq]["prm"]`
says so (docs/distill-format.md, "Process reward"). Pure logic: build the block and the advantages,
mark the effective turns, read them back, and list what breaks the contract.

- `advantages[seq][pos]` is the turn's score (+1.0, -1.0 or 0.0) at every position of an EFFECTIVE
  turn's span, and 0.0 at every other position (prompt, tool output, turns that were not effective).
- `overrides[seq]["prm"]` is `{"version": 1, "carrier": "advantages", "m": m, "backend": name,
  "at_least_one_effective": bool, "turns": [...]}` with one entry per turn span (the same spans as
  `overrides[seq]["turn_spans"]`, in order): `span`, `status` (`scored`, `no_next_state`,
  `judge_error`, `skipped`), `score` (-1, 0 or 1; 0 unless scored), `effective` (whether the turn
  enters the PRM term; its span is then trained with its score, 0 included) and, when scored,
  `votes` (judge/votes.py, `ProcessOutcome.as_dict`, with the judge's `backend` and `latency_s`);
  a `judge_error` turn may carry `error`.
- A turn is effective when it is scored with a non-zero score, or, with `at_least_one_effective`,
  when it is the first scored turn of a session that has no effective turn yet (OpenClaw-RL's
  "at least one effective sample per session": a 0 turn then enters the term with advantage 0, so
  its tokens count in the term's token mean and carry no gradient of their own).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

PRM_KEY = "prm"
PRM_VERSION = 1
PRM_CARRIER = "advantages"
PRM_STATUSES = ("scored", "no_next_state", "judge_error", "skipped")
PRM_SCORES = (-1, 0, 1)


@dataclass(frozen=True)
class ProcessTurn:
    """One turn's process reward as the carrier records it."""

    span: tuple[int, int]
    status: str
    score: int = 0
    effective: bool = False
    votes: dict[str, Any] | None = None
    error: str | None = None
    """Why a `judge_error` turn has no reward (informational)."""

    def as_dict(self) -> dict[str, Any]:
        entry: dict[str, Any] = {
            "span": list(self.span),
            "status": self.status,
            "score": self.score,
            "effective": self.effective,
        }
        if self.votes is not None:
            entry["votes"] = self.votes
        if self.error is not None:
            entry["error"] = self.error
        return entry


def mark_effective(
    scores: Sequence[int | None], *, at_least_one: bool, already_effective: bool = False
) -> list[bool]:
    """Which turns enter the PRM term, in session order. `scores[k]` is None for a turn that was not
    scored. A non-zero score is always effective; with `at_least_one`, the first scored turn is too
    when no earlier turn of the session was (`already_effective` carries that across sequences)."""
    effective = []
    seen = already_effective
    for score in scores:
        mark = score is not None and (score != 0 or (at_least_one and not seen))
        effective.append(mark)
        seen = seen or mark
    return effective


def process_advantages(n: int, turns: Sequence[ProcessTurn]) -> list[float]:
    """The carrier: each effective turn's score over its span, 0.0 everywhere else."""
    advantages = [0.0] * n
    for turn in turns:
        if turn.effective:
            start, end = turn.span
            advantages[start:end] = [float(turn.score)] * (end - start)
    return advantages


def make_prm_block(
    turns: Sequence[ProcessTurn], *, m: int, backend: str, at_least_one_effective: bool
) -> dict[str, Any]:
    return {
        "version": PRM_VERSION,
        "carrier": PRM_CARRIER,
        "m": m,
        "backend": backend,
        "at_least_one_effective": at_least_one_effective,
        "turns": [t.as_dict() for t in turns],
    }


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _turn_problems(k: int, entry: Any, n: int) -> tuple[ProcessTurn | None, list[str]]:
    where = f"prm.turns[{k}]"
    if not isinstance(entry, dict):
        return None, [f"{where} is not an object"]
    problems = []
    span = entry.get("span")
    if not (
        isinstance(span, list)
        and len(span) == 2
        and all(_is_int(v) for v in span)
        and 0 <= span[0] <= span[1] <= n
    ):
        return None, [f"{where}.span {span!r:.60} is not a [start, end) inside the sequence of {n}"]
    status, score, effective = entry.get("status"), entry.get("score"), entry.get("effective")
    if status not in PRM_STATUSES:
        problems.append(f"{where}.status {status!r:.40} is not one of {', '.join(PRM_STATUSES)}")
    if not _is_int(score) or score not in PRM_SCORES:
        problems.append(f"{where}.score {score!r:.40} is not -1, 0 or 1")
    if not isinstance(effective, bool):
        problems.append(f"{where}.effective {effective!r:.40} is not a boolean")
    if problems:
        return None, problems
    if status == "scored" and not isinstance(entry.get("votes"), dict):
        problems.append(f"{where} is scored and has no votes")
    if status != "scored" and (score != 0 or effective):
        problems.append(f"{where} has status {status} but score {score} / effective {effective}")
    if status == "scored" and score != 0 and not effective:
        problems.append(f"{where} has score {score} and is not effective (a non-zero score always is)")
    turn = ProcessTurn((span[0], span[1]), status, score, effective, entry.get("votes"), entry.get("error"))
    return turn, problems


def parse_prm_block(block: Any, n: int) -> tuple[list[ProcessTurn], list[str]]:
    """The turns of a PRM block and every problem of its shape (an empty list when it is sound)."""
    if not isinstance(block, dict):
        return [], [f"prm block is a {type(block).__name__}, not an object"]
    problems = []
    if block.get("version") != PRM_VERSION:
        problems.append(f"prm.version {block.get('version')!r:.40} is not {PRM_VERSION}")
    if block.get("carrier") != PRM_CARRIER:
        problems.append(f"prm.carrier {block.get('carrier')!r:.40} is not {PRM_CARRIER!r}")
    if not _is_int(block.get("m")) or block["m"] < 1:
        problems.append(f"prm.m {block.get('m')!r:.40} is not a positive integer")
    if not isinstance(block.get("at_least_one_effective"), bool):
        problems.append("prm.at_least_one_effective is not a boolean")
    entries = block.get("turns")
    if not isinstance(entries, list):
        return [], [*problems, "prm.turns is not a list"]
    turns = []
    for k, entry in enumerate(entries):
        turn, turn_problems = _turn_problems(k, entry, n)
        problems.extend(turn_problems)
        if turn is not None:
            turns.append(turn)
    for a, b in zip(turns, turns[1:], strict=False):
        if b.span[0] < a.span[1]:
            problems.append(f"prm.turns spans {list(a.span)} and {list(b.span)} overlap or are out of order")
    return turns, problems


def prm_problems(
    block: Any, advantages: Any, n: int, generated: Sequence[bool], turn_spans: Any = None
) -> list[tuple[int | None, str]]:
    """(position or None, message) for everything that breaks the PRM contract in one sequence:
    the block's shape, its spans against `overrides[seq]["turn_spans"]` (when given), spans over
    generated positions only, and `advantages` equal to the carrier `process_advantages` builds."""
    turns, problems = parse_prm_block(block, n)
    out: list[tuple[int | None, str]] = [(None, p) for p in problems]
    if problems:
        return out
    if isinstance(turn_spans, list) and [list(t.span) for t in turns] != turn_spans:
        out.append((None, f"prm.turns spans {[list(t.span) for t in turns]!r:.120} differ from turn_spans"))
    for turn in turns:
        masked = [p for p in range(*turn.span) if not generated[p]]
        if masked:
            out.append(
                (masked[0], f"prm turn span {list(turn.span)} covers a position the policy did not generate")
            )
    if not isinstance(advantages, list) or len(advantages) != n:
        got = len(advantages) if isinstance(advantages, list) else type(advantages).__name__
        out.append((None, f"advantages must be a list of {n} numbers (the PRM carrier), got {got}"))
        return out
    expected = process_advantages(n, turns)
    for pos, (value, want) in enumerate(zip(advantages, expected, strict=True)):
        if not isinstance(value, int | float) or isinstance(value, bool) or float(value) != want:
            out.append((pos, f"advantages[{pos}] is {value!r:.20}; the PRM carrier says {want}"))
            break
    return out
