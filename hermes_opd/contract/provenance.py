"""Provenance of distill rows (`overrides[seq]["opd"]`, docs/distill-format.md): parse it, and derive
which positions a sequence's scored turns cover. Pure functions."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from hermes_opd.contract.constants import (
    FORMAT_VERSION,
    MASKED,
    MODE_DENSE_K1,
    MODE_TOPK,
    MODES,
    NEXT_STATE_ROLES,
    SUPPORTED_FORMAT_VERSIONS,
    TURN_STATUSES,
)

HINT_SELECTION_KEY = "hint_selection"
"""Key of a turn entry that records how its hint was chosen among candidates (docs/distill-format.md)."""


def turn_provenance(
    span: tuple[int, int],
    message_index: int | None,
    status: str,
    *,
    next_state_role: str | None = None,
    votes: dict[str, Any] | None = None,
    hint: str | None = None,
    hint_insert_at: int | None = None,
    replaced_range: tuple[int, int] | None = None,
    replacement_ids: list[int] | None = None,
    teacher_prompt_len: int | None = None,
    teacher_path: str | None = None,
    error: str | None = None,
    hint_selection: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The one writer of a turn's entry in `opd.turns` (docs/distill-format.md), scored or not:
    `votes` and `hint` when the judge gave them; the splice and teacher fields on a scored turn
    only; `error` cut to 500 characters; the hint selection (policy, candidates, scores, winner)
    when a teacher policy chose among candidates."""
    entry: dict[str, Any] = {
        "span": [span[0], span[1]],
        "message_index": message_index,
        "next_state_role": next_state_role,
        "status": status,
    }
    if votes is not None:
        entry["votes"] = votes
    if hint is not None:
        entry["hint"] = hint
    if status == "scored":
        entry["hint_insert_at"] = hint_insert_at
        entry["replaced_range"] = list(replaced_range) if replaced_range else None
        entry["replacement_ids"] = replacement_ids
        entry["teacher_prompt_len"] = teacher_prompt_len
        entry["teacher_path"] = teacher_path
    if error:
        entry["error"] = error[:500]
    if hint_selection is not None:
        entry[HINT_SELECTION_KEY] = dict(hint_selection)
    return entry


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _as_span(value: Any) -> tuple[int, int] | None:
    if isinstance(value, list | tuple) and len(value) == 2 and all(_is_int(v) for v in value):
        return int(value[0]), int(value[1])
    return None


def _as_ids(value: Any) -> list[int] | None:
    if isinstance(value, list) and all(_is_int(t) for t in value):
        return [int(t) for t in value]
    return None


@dataclass(frozen=True)
class TurnRecord:
    """One entry of `overrides[seq]["opd"]["turns"]`, parsed leniently."""

    span: tuple[int, int] | None
    status: str
    hint: str | None = None
    votes: dict[str, Any] | None = None
    next_state_role: str | None = None
    message_index: int | None = None
    hint_insert_at: int | None = None
    hint_token_ids: list[int] | None = None
    """Version 1 only: the hint's own ids, spliced in at `hint_insert_at`."""
    teacher_prompt_len: int | None = None
    replaced_range: tuple[int, int] | None = None
    """Version 2: the student positions `[r0, r1)` the teacher input replaces (around the anchor)."""
    replacement_ids: list[int] | None = None
    """Version 2: the ids that replace them (the tokenizer's encoding of that text with the hint)."""
    teacher_path: str | None = None
    """Which teacher path scored the turn (`transformers`, `generate`, `completions`)."""

    @property
    def is_scored(self) -> bool:
        return self.status == "scored" and self.span is not None

    @property
    def splice(self) -> tuple[tuple[int, int], list[int]] | None:
        """(replaced range, replacement ids) for either version (v1: an empty range at the anchor,
        replaced by the hint's ids), or None when the record lacks them."""
        if self.replaced_range is not None and self.replacement_ids is not None:
            return self.replaced_range, self.replacement_ids
        if self.hint_insert_at is not None and self.hint_token_ids is not None:
            return (self.hint_insert_at, self.hint_insert_at), self.hint_token_ids
        return None


def teacher_input_ids(tokens: list[int], turn: TurnRecord) -> list[int]:
    """The exact ids the teacher scored for a scored turn, rebuilt from `tokens` and provenance alone:
    `tokens[:r0] + replacement_ids + tokens[r1:end]` (v1: `r0 == r1 == hint_insert_at`)."""
    splice = turn.splice
    if turn.span is None or splice is None:
        raise ValueError(f"turn {turn.span} carries no splice provenance")
    (r0, r1), replacement = splice
    return list(tokens[:r0]) + list(replacement) + list(tokens[r1 : turn.span[1]])


@dataclass(frozen=True)
class Provenance:
    """A parsed `overrides[seq]["opd"]` block plus everything wrong with it."""

    format_version: Any = None
    mode: str = MODE_TOPK
    k: int | None = None
    turn_spans: list[tuple[int, int]] = field(default_factory=list)
    turns: list[TurnRecord] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def scored_turns(self) -> list[TurnRecord]:
        return [turn for turn in self.turns if turn.is_scored]


def _parse_turn(
    index: int, raw: Any, problems: list[str], version: Any = FORMAT_VERSION
) -> TurnRecord | None:
    if not isinstance(raw, dict):
        problems.append(f"turns[{index}] is not an object")
        return None
    span = _as_span(raw.get("span"))
    if span is None:
        problems.append(f"turns[{index}].span is not [start, end]: {raw.get('span')!r}")
    status = raw.get("status")
    if status not in TURN_STATUSES:
        problems.append(f"turns[{index}].status {status!r} is not one of {TURN_STATUSES}")
        status = str(status)
    hint = raw.get("hint")
    votes = raw.get("votes")
    record = TurnRecord(
        span=span,
        status=status,
        hint=hint if isinstance(hint, str) else None,
        votes=votes if isinstance(votes, dict) else None,
        next_state_role=raw.get("next_state_role"),
        message_index=raw.get("message_index") if _is_int(raw.get("message_index")) else None,
        hint_insert_at=raw.get("hint_insert_at") if _is_int(raw.get("hint_insert_at")) else None,
        hint_token_ids=_as_ids(raw.get("hint_token_ids")) if version == 1 else None,
        teacher_prompt_len=raw.get("teacher_prompt_len") if _is_int(raw.get("teacher_prompt_len")) else None,
        replaced_range=_as_span(raw.get("replaced_range")) if version != 1 else None,
        replacement_ids=_as_ids(raw.get("replacement_ids")) if version != 1 else None,
        teacher_path=raw.get("teacher_path") if isinstance(raw.get("teacher_path"), str) else None,
    )
    if status == "scored":
        _check_scored_turn(index, raw, record, problems, version)
    return record


def _check_scored_turn(
    index: int, raw: dict[str, Any], turn: TurnRecord, problems: list[str], version: Any
) -> None:
    where = f"turns[{index}] (scored)"
    if not turn.hint:
        problems.append(f"{where}: hint is missing or empty")
    if turn.votes is None:
        problems.append(f"{where}: votes is missing")
    if turn.next_state_role not in NEXT_STATE_ROLES:
        problems.append(f"{where}: next_state_role {raw.get('next_state_role')!r} is not tool/user")
    if turn.message_index is None:
        problems.append(f"{where}: message_index is missing")
    if version == 1:
        _check_v1_splice(where, turn, problems)
    else:
        _check_v2_splice(where, turn, problems)


def _check_v1_splice(where: str, turn: TurnRecord, problems: list[str]) -> None:
    if turn.hint_insert_at is None or turn.hint_token_ids is None or turn.teacher_prompt_len is None:
        problems.append(f"{where}: hint_insert_at, hint_token_ids and teacher_prompt_len are all required")
        return
    if turn.span is None:
        return
    start = turn.span[0]
    if not 0 <= turn.hint_insert_at <= start:
        problems.append(f"{where}: hint_insert_at {turn.hint_insert_at} is not within [0, {start}]")
    expected = start + len(turn.hint_token_ids)
    if turn.teacher_prompt_len != expected:
        problems.append(
            f"{where}: teacher_prompt_len {turn.teacher_prompt_len} != span start {start} + "
            f"{len(turn.hint_token_ids)} hint tokens = {expected}"
        )


def _check_v2_splice(where: str, turn: TurnRecord, problems: list[str]) -> None:
    if (
        turn.hint_insert_at is None
        or turn.replaced_range is None
        or turn.replacement_ids is None
        or turn.teacher_prompt_len is None
    ):
        problems.append(
            f"{where}: hint_insert_at, replaced_range ([r0, r1]), replacement_ids and teacher_prompt_len "
            "are all required"
        )
        return
    if turn.span is None:
        return
    start = turn.span[0]
    r0, r1 = turn.replaced_range
    if not 0 <= r0 <= turn.hint_insert_at <= r1 <= start:
        problems.append(
            f"{where}: replaced_range [{r0}, {r1}) and hint_insert_at {turn.hint_insert_at} break "
            f"0 <= r0 <= hint_insert_at <= r1 <= span start {start}"
        )
    if not turn.replacement_ids:
        problems.append(f"{where}: replacement_ids is empty (the hint adds text, so it adds ids)")
    expected = start - (r1 - r0) + len(turn.replacement_ids)
    if turn.teacher_prompt_len != expected:
        problems.append(
            f"{where}: teacher_prompt_len {turn.teacher_prompt_len} != span start {start} - "
            f"{r1 - r0} replaced + {len(turn.replacement_ids)} replacement ids = {expected}"
        )


def parse_provenance(opd: Any) -> Provenance:
    """Parse an `overrides[seq]["opd"]` block; `problems` lists every way it breaks the contract."""
    problems: list[str] = []
    if not isinstance(opd, dict):
        return Provenance(problems=['overrides[seq]["opd"] is missing or not an object'])
    version = opd.get("format_version")
    if not _is_int(version) or version not in SUPPORTED_FORMAT_VERSIONS:
        problems.append(
            f"format_version is {version!r}, expected one of {SUPPORTED_FORMAT_VERSIONS} (current {FORMAT_VERSION})"
        )
    mode = opd.get("mode")
    if mode not in MODES:
        problems.append(f"mode {mode!r} is not one of {MODES}; rows are checked as {MODE_TOPK}")
        mode = MODE_TOPK
    k = opd.get("k")
    if not _is_int(k) or k < 1:
        problems.append(f"k {k!r} is not a positive integer")
        k = None
    raw_spans = opd.get("turn_spans")
    spans: list[tuple[int, int]] = []
    if not isinstance(raw_spans, list):
        problems.append("turn_spans is missing or not a list")
    else:
        for i, raw in enumerate(raw_spans):
            span = _as_span(raw)
            if span is None:
                problems.append(f"turn_spans[{i}] is not [start, end]: {raw!r}")
            else:
                spans.append(span)
        for (s0, e0), (s1, e1) in zip(spans, spans[1:], strict=False):
            if s0 > e0 or e0 > s1 or s1 > e1:
                problems.append(f"turn_spans are not ordered and disjoint: [{s0}, {e0}) then [{s1}, {e1})")
    raw_turns = opd.get("turns")
    turns: list[TurnRecord] = []
    if not isinstance(raw_turns, list):
        problems.append("turns is missing or not a list")
    else:
        for i, raw in enumerate(raw_turns):
            turn = _parse_turn(i, raw, problems, version)
            if turn is not None:
                turns.append(turn)
        if isinstance(raw_spans, list) and len(raw_turns) != len(raw_spans):
            problems.append(f"{len(raw_turns)} turns but {len(raw_spans)} turn_spans (one entry per turn)")
        elif [t.span for t in turns] != spans and len(turns) == len(spans):
            problems.append("turns[*].span differs from turn_spans")
    return Provenance(
        format_version=version, mode=mode, k=k, turn_spans=spans, turns=turns, problems=problems
    )


def scored_position_mask(n: int, provenance: Provenance) -> np.ndarray:
    """Boolean [n]: True inside the span of a turn whose status is `scored` (clipped to [0, n))."""
    mask = np.zeros(n, dtype=bool)
    for turn in provenance.scored_turns:
        start, end = turn.span  # type: ignore[misc]
        mask[max(start, 0) : max(min(end, n), 0)] = True
    return mask


def scored_positions(group: dict[str, Any], seq: int) -> np.ndarray:
    """Boolean [n]: positions of `group` sequence `seq` that carry teacher data.

    `topk`: every non-empty row. `dense_k1`: generated positions inside scored turns (the other
    rows hold the student's own logprob, not teacher data).
    """
    tokens = group["tokens"][seq]
    n = len(tokens)
    provenance = sequence_provenance(group, seq)
    if provenance.mode == MODE_DENSE_K1:
        masks = np.asarray(group["masks"][seq])
        return scored_position_mask(n, provenance) & (masks != MASKED)
    rows = group.get("distill_token_ids") or []
    if seq >= len(rows) or not isinstance(rows[seq], list):
        return np.zeros(n, dtype=bool)
    return np.array([bool(row) for row in rows[seq]], dtype=bool)


def sequence_provenance(group: dict[str, Any], seq: int) -> Provenance:
    overrides = group.get("overrides")
    if isinstance(overrides, list) and seq < len(overrides) and isinstance(overrides[seq], dict):
        return parse_provenance(overrides[seq].get("opd"))
    return parse_provenance(None)


def best_candidate(scores: list[list[float]]) -> int:
    """Index of the earliest candidate with the (lexicographically) largest score list: the rule
    every `hint_choice` policy decides by (judge/hint_choice.py)."""
    if not scores:
        raise ValueError("no candidates to choose from")
    return min(range(len(scores)), key=lambda i: (tuple(-float(x) for x in scores[i]), i))


def rederive_hint(entry: dict[str, Any]) -> str | None:
    """The hint a turn entry's recorded candidates and scores select, or None when it records no
    selection. A reviewer compares it with `entry["hint"]`."""
    selection = entry.get(HINT_SELECTION_KEY)
    if not isinstance(selection, dict):
        return None
    candidates, scores = selection.get("candidates"), selection.get("scores")
    if not isinstance(candidates, list) or not isinstance(scores, list) or len(candidates) != len(scores):
        raise ValueError("hint_selection needs parallel 'candidates' and 'scores' lists")
    winner = best_candidate(scores)
    if selection.get("winner") != winner:
        raise ValueError(
            f"hint_selection records winner {selection.get('winner')!r}; its scores select {winner}"
        )
    return candidates[winner]
