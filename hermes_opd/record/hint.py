"""Where and how a hindsight hint enters the teacher's context (pure logic).

The hint is appended to the content of the last user message before the turn (or of the last
message when there is none), as `HINT_SEPARATOR + hint`. For the teacher this happens at the token
level, at the end of that message's content in the student's exact prefix. The pipeline builds that
input with `hermes_opd.record.hint_splice.build_canonical_teacher_input`, which re-encodes the few ids
around the hint canonically; `build_teacher_input` below is the plain splice of format version 1
(the hint's own ids inserted as they are), kept for benchmarks and for reading version-1 files.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from hermes_opd.record.trajectory import Trajectory, TurnSpan

HINT_SEPARATOR = "\n\n[user's hint / instruction]\n"
"""Text placed between the message content and the hint. Part of the data contract: changing it
changes every teacher distribution, so it is pinned by a test."""


def hint_text(hint: str) -> str:
    return HINT_SEPARATOR + hint.strip()


def enhance_messages(context: list[dict[str, Any]], hint: str) -> list[dict[str, Any]]:
    """A deep copy of `context` with the hint appended to the last user message (else the last message)."""
    if not context:
        raise ValueError("cannot add a hint to an empty context")
    enhanced = copy.deepcopy(context)
    users = [i for i, m in enumerate(enhanced) if m.get("role") == "user"]
    target = enhanced[users[-1] if users else -1]
    content = target.get("content")
    target["content"] = (content if isinstance(content, str) else "") + hint_text(hint)
    return enhanced


@dataclass(frozen=True)
class TeacherInput:
    """The exact ids the teacher scores for one turn, and how they were built."""

    ids: list[int]
    prompt_len: int
    """Teacher position of the turn's first token: row `prompt_len + j` scores student token `start + j`."""
    hint_insert_at: int
    hint_token_ids: list[int]


def build_teacher_input(trajectory: Trajectory, span: TurnSpan, hint_token_ids: list[int]) -> TeacherInput:
    """`tokens[:a] + hint + tokens[a:start] + tokens[start:end]`, a = the turn's hint anchor (v1 splice:
    not what a byte-level BPE writes when the content ends in punctuation, see hint_splice.py)."""
    anchor = trajectory.hint_anchor(span)
    if anchor is None:
        raise ValueError(
            f"turn at [{span.start}, {span.end}) has no hint anchor (template changed the content?)"
        )
    if not 0 <= anchor <= span.start:
        raise ValueError(f"hint anchor {anchor} lies after the turn start {span.start}")
    tokens = trajectory.tokens
    ids = tokens[:anchor] + list(hint_token_ids) + tokens[anchor : span.end]
    return TeacherInput(
        ids=ids,
        prompt_len=len(ids) - len(span),
        hint_insert_at=anchor,
        hint_token_ids=list(hint_token_ids),
    )
