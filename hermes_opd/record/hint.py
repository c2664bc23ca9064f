"""Where and how a hindsight hint enters the teacher's context (pure logic).

The hint is appended to the content of the last user message before the turn (or of the last
message when there is none), as `HINT_SEPARATOR + hint`. For the teacher this happens at the token
level, at the end of that message's content in the student's exact prefix. The pipeline builds that
input with `hermes_opd.record.hint_splice.build_canonical_teacher_input`, which re-encodes the few ids
around the hint canonically (format version 2). Files of version 1 (the hint's own ids inserted as
they are) are still read: `hermes_opd.contract.provenance` and `hermes_opd.record.splice_audit`.
"""

from __future__ import annotations

import copy
from typing import Any

HINT_SEPARATOR = "\n\n[user's hint / instruction]\n"
"""Text placed between the message content and the hint. Part of the data contract: changing it
changes every teacher distribution, so it is pinned by a test."""


def hint_text(hint: str) -> str:
    return HINT_SEPARATOR + hint.strip()


def enhance_messages(context: list[dict[str, Any]], hint: str) -> list[dict[str, Any]]:
    """A deep copy of `context` with the hint appended to the last user message (else the last
    message): the message-level view of the same insertion, for prompts written with the hint
    (`hermes-opd student-eval`'s hinted attempt)."""
    if not context:
        raise ValueError("cannot add a hint to an empty context")
    enhanced = copy.deepcopy(context)
    users = [i for i, m in enumerate(enhanced) if m.get("role") == "user"]
    target = enhanced[users[-1] if users else -1]
    content = target.get("content")
    target["content"] = (content if isinstance(content, str) else "") + hint_text(hint)
    return enhanced
