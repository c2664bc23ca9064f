"""Where and how a hindsight hint enters the teacher's context (pure logic).

The hint is appended to the content of the last user message before the turn (or of the last
message when there is none), as `HINT_SEPARATOR + hint`. For the teacher this happens at the token
level, at the end of that message's content in the student's exact prefix. The pipeline builds that
input with `hermes_opd.record.hint_splice.build_canonical_teacher_input`, which re-encodes the few ids
around the hint canonically (format version 2). Files of version 1 (the hint's own ids inserted as
they are) are still read: `hermes_opd.contract.provenance` and `hermes_opd.record.splice_audit`.
"""

from __future__ import annotations

HINT_SEPARATOR = "\n\n[user's hint / instruction]\n"
"""Text placed between the message content and the hint. Part of the data contract: changing it
changes every teacher distribution, so it is pinned by a test."""


def hint_text(hint: str) -> str:
    return HINT_SEPARATOR + hint.strip()
