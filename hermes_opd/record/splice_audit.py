"""Audit hint splices: is the teacher's input, around the hint, what the tokenizer itself writes?
(pure logic over a tokenizer's encode/decode)

For each scored turn the teacher input is rebuilt from provenance alone (`teacher_input_ids`). The
*window* around the splice is the text between the template boundaries (special/added tokens)
enclosing the replaced ids; the splice is canonical when `encode(decode(window)) == window`.
`scripts/count_noncanonical_splices.py` runs this over a groups JSONL file.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from hermes_opd.contract.provenance import (
    TurnRecord,
    sequence_provenance,
    teacher_input_ids,
)
from hermes_opd.record.hint import hint_text


@dataclass(frozen=True)
class SpliceCheck:
    """One scored turn's splice window and whether it is canonical."""

    group: int
    seq: int
    span: tuple[int, int]
    window: tuple[int, int]
    """Teacher-input positions [a, b) of the boundary-delimited window around the splice."""
    canonical: bool
    ids: list[int]
    reencoded: list[int]


def splice_window(
    teacher_ids: list[int], insert_at: int, inserted: int, limit: int, boundaries: frozenset[int]
) -> tuple[int, int]:
    """[a, b) around teacher positions [insert_at, insert_at + inserted): a just after the last
    boundary before them, b the first boundary at or after their end (at most `limit`)."""
    a = insert_at
    while a > 0 and teacher_ids[a - 1] not in boundaries:
        a -= 1
    b = insert_at + inserted
    while b < limit and teacher_ids[b] not in boundaries:
        b += 1
    return a, b


def check_splice(
    teacher_ids: list[int],
    insert_at: int,
    inserted: int,
    prompt_len: int,
    *,
    encode: Callable[[str], list[int]],
    decode: Callable[[list[int]], str],
    boundaries: Iterable[int],
) -> tuple[tuple[int, int], bool, list[int], list[int]]:
    """(window, canonical, window ids, re-encoded window ids)."""
    stops = frozenset(boundaries)
    a, b = splice_window(teacher_ids, insert_at, inserted, prompt_len, stops)
    window = teacher_ids[a:b]
    reencoded = list(encode(decode(window)))
    return (a, b), reencoded == window, window, reencoded


def v1_splice_of(turn: TurnRecord, encode: Callable[[str], list[int]]) -> tuple[tuple[int, int], list[int]]:
    """The splice version 1 would have made for this turn: the hint's own ids at the anchor."""
    if turn.hint_insert_at is None or not turn.hint:
        raise ValueError("turn has no anchor or hint")
    return (turn.hint_insert_at, turn.hint_insert_at), list(encode(hint_text(turn.hint)))


def audit_groups(
    groups: Iterable[dict[str, Any]],
    *,
    encode: Callable[[str], list[int]],
    decode: Callable[[list[int]], str],
    boundaries: Iterable[int],
    as_v1: bool = False,
) -> Iterator[SpliceCheck]:
    """Check every scored turn of every group. `as_v1`: check the splice version 1 would have made on
    the same record instead of the one recorded (the "before" figure)."""
    stops = frozenset(boundaries)
    for g, group in enumerate(groups):
        for seq, tokens in enumerate(group.get("tokens") or []):
            for turn in sequence_provenance(group, seq).scored_turns:
                splice = v1_splice_of(turn, encode) if as_v1 else turn.splice
                if splice is None:
                    continue
                (r0, r1), replacement = splice
                start, end = turn.span  # type: ignore[misc]
                if as_v1:
                    ids = list(tokens[:r0]) + replacement + list(tokens[r1:end])
                else:
                    ids = teacher_input_ids(tokens, turn)
                prompt_len = start - (r1 - r0) + len(replacement)
                window, ok, window_ids, reencoded = check_splice(
                    ids, r0, len(replacement), prompt_len, encode=encode, decode=decode, boundaries=stops
                )
                yield SpliceCheck(g, seq, (start, end), window, ok, window_ids, reencoded)
