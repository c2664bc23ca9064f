"""Map teacher prompt-logprob positions onto the student's positions (pure logic).

Teacher positions `[P, P+n)` are the student's turn tokens `[start, start+n)` under the enhanced
context. Nothing is searched: the mapping is an offset, and it is checked token by token.
"""

from __future__ import annotations

from hermes_opd.contract.errors import HermesOPDError
from scoring.response_parsing import PromptTopK
from scoring.teacher_rows import normalize_turn_rows


class AlignmentError(HermesOPDError, ValueError):
    """The teacher's scored ids are not the student's turn ids at the expected offset."""


def turn_rows(
    topk: PromptTopK, prompt_len: int, student_ids: list[int], k: int
) -> tuple[list[list[int]], list[list[float]]]:
    """Contract rows (top-k sorted, student token appended when outside) for the turn's positions."""
    n = len(student_ids)
    if prompt_len < 1:
        raise AlignmentError(f"teacher prompt length {prompt_len} leaves no context for the first turn token")
    if prompt_len + n != len(topk.prompt_ids):
        raise AlignmentError(
            f"teacher scored {len(topk.prompt_ids)} ids, expected prompt {prompt_len} + turn {n}"
        )
    scored_turn = topk.prompt_ids[prompt_len:]
    if scored_turn != list(student_ids):
        first = next(j for j, (a, b) in enumerate(zip(scored_turn, student_ids, strict=True)) if a != b)
        raise AlignmentError(
            f"teacher turn id {scored_turn[first]} != student id {student_ids[first]} at offset {first}"
        )
    return normalize_turn_rows(topk.token_ids[prompt_len:], topk.logprobs[prompt_len:], student_ids, k)
