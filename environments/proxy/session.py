"""One live session: its transcript record and the history the client is expected to re-send
(pure logic over a tokenizer; the server holds the lock and the clock).

`prepare(messages)` says how a request continues the session:
- it re-sends exactly what the proxy produced (same messages, our replies as we gave them) and adds
  only user and/or tool messages: those are the last turn's next state; the recorder extends its
  exact token stream with them and the finished turn is returned for training;
- anything else (an edited, truncated or reordered history, an assistant message the proxy did not
  write, other tools, a template that rewrites history): the session forks. A new record starts
  from the request's messages, all of them masked context, and the pending turn is dropped
  without a next state. So no token the policy did not sample is ever trained.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from environments.proxy.openai_wire import comparable, template_messages
from environments.proxy.turn_sample import cut_turn
from hermes_opd.record.trajectory import Trajectory
from hermes_opd.record.transcript_recorder import TemplateNotAppendOnlyError, TranscriptRecorder


@dataclass
class Prepared:
    """What a request's messages mean for the session."""

    context: list[int]
    """The exact prompt ids to generate from."""
    finished: tuple[Trajectory, tuple[int, str, int]] | None = None
    """(cut turn, (turn index, policy model, policy version)) of the turn whose next state this
    request brought, if any."""
    forked: str | None = None
    """Why the session started a new record (None: it continued)."""
    dropped_turn: bool = False
    """A turn was waiting for its next state and lost it (fork)."""


@dataclass
class SessionState:
    """The record of one session and what it expects next."""

    session_id: str
    tokenizer: Any
    recorder: TranscriptRecorder | None = None
    expected: list[tuple[Any, ...]] = field(default_factory=list)
    """`comparable` form of the history the client should re-send (its messages and our reply)."""
    tools: list[dict[str, Any]] | None = None
    turn_count: int = 0
    """Turns answered in this session (all records)."""
    waiting: tuple[int, str, int] | None = None
    """(turn index, policy model, policy version) of the turn waiting for its next state."""
    private: bool = False
    """A no-train request touched this session: it is never trained from here on."""
    forks: int = 0

    def _fork(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, reason: str
    ) -> Prepared:
        dropped = self.waiting is not None
        self.recorder = TranscriptRecorder(self.tokenizer, tools)
        self.tools = tools
        self.waiting = None
        self.forks += int(self.expected != [])
        context = self.recorder.start(template_messages(messages))
        return Prepared(context=context, forked=reason, dropped_turn=dropped)

    def prepare(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> Prepared:
        seen = [comparable(m) for m in messages]
        if self.recorder is None or not self.expected:
            return self._fork(messages, tools, "new")
        reason = self._divergence(seen, tools)
        if reason is not None:
            return self._fork(messages, tools, reason)
        new = template_messages(messages)[len(self.expected) :]
        recorder = self.recorder
        sequences_before = len(recorder.finished)
        try:
            context = recorder.extend(new)
        except TemplateNotAppendOnlyError:
            return self._fork(messages, tools, "template_rewrites_history")
        record = (
            recorder.finished[-1]
            if len(recorder.finished) > sequences_before
            else recorder.trajectories()[-1]
        )
        waiting, self.waiting = self.waiting, None
        finished = None
        if waiting is not None and record.turns:
            finished = (cut_turn(record, len(record.turns) - 1), waiting)
        return Prepared(context=context, finished=finished)

    def _divergence(self, seen: list[tuple[Any, ...]], tools: list[dict[str, Any]] | None) -> str | None:
        if tools != self.tools:
            return "tools_changed"
        n = len(self.expected)
        if len(seen) <= n:
            return "history_truncated" if seen != self.expected[: len(seen)] else "resent_without_reply"
        if seen[:n] != self.expected:
            return "history_edited"
        if any(m[0] == "assistant" for m in seen[n:]):
            return "foreign_assistant_message"
        return None

    def record_reply(self, messages: list[dict[str, Any]], generated: Any, assistant_message: dict[str, Any],
                     raw_text: str, reply: dict[str, Any], policy: tuple[str, int]) -> int:  # fmt: skip
        """Record the turn just generated; return its index in the session."""
        assert self.recorder is not None
        self.recorder.record_generation(generated.token_ids, generated.logprobs, assistant_message, raw_text)
        self.expected = [comparable(m) for m in messages] + [comparable(reply)]
        turn = self.turn_count
        self.turn_count += 1
        self.waiting = (turn, *policy)
        return turn
