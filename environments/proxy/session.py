"""One live session: its branches (each a transcript record and the history its client is expected
to re-send), planned and committed in two steps (pure logic over a tokenizer; the table in
environments/proxy/sessions.py holds the lock, the clock and the bounds). docs/proxy/sessions.md.

`plan(messages, tools)` changes nothing: it says how a request continues the session and renders
its exact prompt ids on a private copy of the record. `commit(plan, ...)`, once the policy's whole
answer arrived, is the only mutation. A request that fails or is refused never commits, so the
session stays exactly as it was and the client's retry is planned against the same state.

How a request continues the session (the first rule that holds):
1. it re-sends a branch's expected history exactly (its messages and our reply as we gave it) and
   adds only user and/or tool messages: those are the waiting turn's next state; the record
   extends its exact token stream with them and the finished turn is returned for training;
2. it re-sends the messages of a branch's last request unchanged, then ONE assistant message that
   re-renders our reply in another form (smolagents' "Calling tools: ..." text), then only
   non-assistant messages: those finish the waiting turn from the OLD record (its sampled tokens,
   exactly) with that next state, and a new record starts from the request's messages, all masked;
3. in a session named by a header, a request that re-sends exactly the request a branch answered
   (its client never got that answer) replaces that branch with a new record, all of it masked;
4. anything else (an edited, truncated or reordered history, an assistant message the proxy did not
   write, other tools, a side call with an unrelated history) starts a new record in a new branch,
   all of it masked context; other branches keep their waiting turns. In a session found by its
   history (no session header) such a request starts a session of its own instead.
So no token the policy did not sample is ever trained.
"""

from __future__ import annotations

import copy
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from environments.proxy.history import (
    Comparable,
    HistoryKeys,
    comparable,
    history_digest,
    history_keys,
    message_digest,
    rerenders,
    template_form,
)
from environments.proxy.turn_sample import cut_turn
from hermes_opd.record.trajectory import Trajectory
from hermes_opd.record.transcript_recorder import (
    TemplateNotAppendOnlyError,
    TranscriptRecorder,
    first_context,
)

Waiting = tuple[int, str, int]
"""(turn index in the session, policy model, policy version) of a turn waiting for its next state."""
Finished = tuple[Trajectory, Waiting]

CONTINUED_REMEMBERED = 64
"""How many continued histories a session remembers, to tell a second client apart (per session)."""


@dataclass(eq=False)
class Branch:
    """One record of a session and the history its client should re-send next."""

    recorder: TranscriptRecorder
    expected: tuple[str, ...]
    """Digests of the messages the client should re-send: its last request's and our reply."""
    reply: Comparable
    """Our reply as the client should re-send it (to recognise a re-rendering of it)."""
    tools: list[dict[str, Any]] | None
    waiting: Waiting | None = None
    used: int = 0
    """The session's tick when this branch was last continued (the oldest one goes first)."""

    @property
    def tokens(self) -> int:
        return len(self.recorder.tokens)


@dataclass(frozen=True, eq=False)
class Plan:
    """What one request means for the session; nothing is changed until `commit`."""

    context: list[int]
    """The exact prompt ids to generate from."""
    forked: str | None
    """Why a new record starts (None: the request continues a record; "new": the first one)."""
    recorder: TranscriptRecorder | None
    """This request's record: a private copy, extended or new (None: a no-train request)."""
    expected: tuple[str, ...]
    tools: list[dict[str, Any]] | None
    branch: Branch | None
    """The branch this request continues or replaces (None: a new branch)."""
    finished: Finished | None
    """The waiting turn this request brought the next state of (delivered by `commit`)."""
    own_session: bool
    """The turn starts a session of its own (a history-found session nothing here continues)."""
    continued: str | None
    """The digest of the history this request continued (remembered, to tell a second client)."""
    version: int


@dataclass(frozen=True)
class Committed:
    """What `commit` did."""

    finished: Finished | None
    """(cut turn, (turn index, policy model, policy version)) to submit to the feed, or None."""
    session_id: str
    """The session of the finished turn (and of this request)."""
    recorded_turn: int | None
    """The index of the turn just recorded, or None (served, not recorded)."""
    recorded_session_id: str
    """Where the new turn went: `session_id`, or a new session when another client had already
    continued this history."""


CommitHook = Callable[["SessionState", "SessionState", Branch | None, Counter], None]


@dataclass(eq=False)
class SessionState:
    """The branches of one session."""

    session_id: str
    tokenizer: Any
    owner: str = "open"
    named: bool = False
    """Found by a session header (True) or by its history (False)."""
    private: bool = False
    """A no-train request's transient session: rendered, never recorded, never in the table."""
    origin: str | None = None
    """Why resolve started this session although the request re-sent a history (a collision)."""
    max_branches: int = 4
    max_tokens: int = 1 << 62
    branches: list[Branch] = field(default_factory=list)
    turn_count: int = 0
    """Turns recorded in this session (all branches)."""
    version: int = 0
    tick: int = 0
    ended: bool = False
    admitted: bool = False
    """Counted against the table's caps (set by the table)."""
    continued: list[str] = field(default_factory=list)
    on_commit: CommitHook | None = None
    spawn: Callable[[SessionState], SessionState] | None = None
    """Makes a session of its own for a turn (set by the table; without one, this session is used)."""
    holder: Any = field(default=None, repr=False)
    """The table's entry (with the lock) for this session, set by the table."""

    @property
    def tokens(self) -> int:
        return sum(b.tokens for b in self.branches)

    @property
    def waiting_turns(self) -> int:
        return sum(b.waiting is not None for b in self.branches)

    # -- plan (pure) ---------------------------------------------------------------------------
    def plan(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        keys: HistoryKeys | None = None,
    ) -> Plan:
        """How this request continues the session, and its exact prompt ids. Changes nothing.
        `keys`: the messages' `history_keys`, when the session lookup already computed them."""
        tools = tools or None
        rendered = template_form(messages)
        if self.private:  # never recorded: the prompt alone
            return Plan(
                first_context(self.tokenizer, rendered, tools),
                "new",
                None,
                (),
                tools,
                None,
                None,
                False,
                None,
                self.version,
            )
        keys = keys or history_keys(messages)
        seen_c = keys.comparables
        seen = tuple(keys.digests)
        ordered = sorted(self.branches, key=lambda b: b.used, reverse=True)
        for branch in ordered:
            n = len(branch.expected)
            if (
                tools == branch.tools
                and len(seen) > n
                and seen[:n] == branch.expected
                and all(c[0] != "assistant" for c in seen_c[n:])
            ):
                return self._continue(branch, rendered, seen, tools)
        for branch in ordered:
            p = len(branch.expected) - 1
            if (
                branch.waiting is not None
                and tools == branch.tools
                and len(seen) > p + 1
                and seen[:p] == branch.expected[:p]
                and seen[p] != branch.expected[p]
                and rerenders(branch.reply, seen_c[p])
                and all(c[0] != "assistant" for c in seen_c[p + 1 :])
            ):
                finished = _with_next_state(branch, rendered[p + 1 :])
                digest = history_digest(self.owner, seen[: p + 1])
                return self._fresh(rendered, seen, tools, "history_rerendered", branch, finished, digest)
        if self.named:
            for branch in ordered:
                if seen == branch.expected[:-1] and tools == branch.tools:
                    # the client re-sent the request this branch answered: it never got that answer
                    return self._fresh(rendered, seen, tools, "request_retried", branch)
        last = max((i for i, c in enumerate(seen_c) if c[0] == "assistant"), default=-1)
        if self.origin is not None:
            reason = self.origin
        elif last >= 0 and history_digest(self.owner, seen[: last + 1]) in self.continued:
            reason = "history_already_continued"
        elif not ordered:
            reason = "new"
        else:
            reason = _divergence(ordered, seen, seen_c, tools)
        own = not self.named and bool(self.branches)
        return self._fresh(rendered, seen, tools, reason, own_session=own)

    def _continue(
        self,
        branch: Branch,
        rendered: list[dict[str, Any]],
        seen: tuple[str, ...],
        tools: list[dict[str, Any]] | None,
    ) -> Plan:
        n = len(branch.expected)
        digest = history_digest(self.owner, branch.expected)
        recorder = _copy(branch.recorder)
        before = len(recorder.finished)
        try:
            context = recorder.extend(rendered[n:])
        except TemplateNotAppendOnlyError:
            finished = _with_next_state(branch, rendered[n:])
            return self._fresh(rendered, seen, tools, "template_rewrites_history", branch, finished, digest)
        record = recorder.finished[-1] if len(recorder.finished) > before else recorder.trajectories()[-1]
        finished = None
        if branch.waiting is not None and record.turns:
            finished = (cut_turn(record, len(record.turns) - 1), branch.waiting)
        return Plan(context, None, recorder, seen, tools, branch, finished, False, digest, self.version)

    def _fresh(
        self,
        rendered: list[dict[str, Any]],
        seen: tuple[str, ...],
        tools: list[dict[str, Any]] | None,
        reason: str,
        branch: Branch | None = None,
        finished: Finished | None = None,
        continued: str | None = None,
        own_session: bool = False,
    ) -> Plan:
        recorder = TranscriptRecorder(self.tokenizer, tools)
        context = recorder.start(rendered)
        return Plan(
            context, reason, recorder, seen, tools, branch, finished, own_session, continued, self.version
        )

    # -- commit (the only mutation) ------------------------------------------------------------
    def commit(
        self,
        plan: Plan,
        generated: Any,
        assistant_message: dict[str, Any],
        raw_text: str,
        reply_message: dict[str, Any],
        policy: tuple[str, int],
        record: bool = True,
    ) -> Committed:
        """Record the answer to a planned request. `record=False`: served, not recorded (the turn
        this request finished is still delivered; the branch it continued ends)."""
        if plan.version != self.version:
            raise RuntimeError("a stale plan: commit() must follow its own plan() under the session's lock")
        counts: Counter[str] = Counter()
        if self.private:
            counts["not_for_training"] += 1
            self._report(self, None, counts)
            return Committed(None, self.session_id, None, self.session_id)
        if plan.forked == UNRELATED:
            counts["branches_unrelated_history"] += 1
        elif plan.forked not in (None, "new"):
            counts[f"forks_{plan.forked}"] += 1
        if plan.forked == "history_already_continued":
            counts["history_collisions"] += 1
        finished = plan.finished if not self.ended else None
        if finished is not None:
            counts["turns_finished"] += 1
            if plan.forked == "history_rerendered":
                counts["turns_finished_rerendered"] += 1
        if plan.branch is not None and any(b is plan.branch for b in self.branches):
            self.branches = [b for b in self.branches if b is not plan.branch]
            if plan.branch.waiting is not None and finished is None:
                why = "request_retried" if plan.forked == "request_retried" else "history_changed"
                counts[f"turns_dropped_{why}"] += 1
        if plan.continued is not None:
            self.continued = [*self.continued, plan.continued][-CONTINUED_REMEMBERED:]
        self.version += 1
        target = self
        if plan.own_session and self.spawn is not None:
            target = self.spawn(self)
        new: Branch | None = None
        if self.ended:
            counts["turns_not_recorded_session_ended"] += 1
        elif not record:
            counts["turns_not_recorded"] += 1
        elif plan.recorder is not None:
            recorder = plan.recorder
            recorder.record_generation(
                list(generated.token_ids), list(generated.logprobs), assistant_message, raw_text
            )
            _hollow_finished(recorder)
            reply = comparable(reply_message)
            target.tick += 1
            new = Branch(
                recorder,
                (*plan.expected, message_digest(reply)),
                reply,
                plan.tools,
                (target.turn_count, *policy),
                target.tick,
            )
            target.turn_count += 1
            target.branches.append(new)
            target.version += int(target is not self)
            target._bound(new, counts)
        self._report(target, new if new is not None and new in target.branches else None, counts)
        recorded = (
            new.waiting[0] if new is not None and new.waiting is not None and new in target.branches else None
        )
        return Committed(finished, self.session_id, recorded, target.session_id)

    def _report(self, target: SessionState, new: Branch | None, counts: Counter) -> None:
        if self.on_commit is not None:
            self.on_commit(self, target, new, counts)

    def _bound(self, new: Branch, counts: Counter) -> None:
        """At most `max_branches` branches and `max_tokens` tokens: a new branch alone over the
        bound is not kept (its turn is served, not recorded); else the oldest other branches go."""
        if new.tokens > self.max_tokens:
            self.branches = [b for b in self.branches if b is not new]
            counts["turns_not_recorded_memory"] += 1
            return
        while len(self.branches) > self.max_branches or self.tokens > self.max_tokens:
            oldest = min((b for b in self.branches if b is not new), key=lambda b: b.used)
            self.drop_branch(
                oldest, "branch_cap" if len(self.branches) > self.max_branches else "memory", counts
            )

    def drop_branch(self, branch: Branch, why: str, counts: Counter) -> None:
        """Forget one branch; a turn still waiting in it is counted as dropped (`why`)."""
        self.branches = [b for b in self.branches if b is not branch]
        self.version += 1
        counts[f"branches_dropped_{why}"] += 1
        if branch.waiting is not None:
            counts[f"turns_dropped_{why}"] += 1

    def end(self) -> int:
        """Forget every branch; return how many turns were waiting for their next state."""
        waiting = self.waiting_turns
        self.branches = []
        self.continued = []
        self.ended = True
        self.version += 1
        return waiting


UNRELATED = "unrelated_history"
"""A request that shares no message but system messages with any branch: a side call (a
title, a summary) under the main conversation's session header, or the main conversation after
one. It starts a branch, as a fork does, but forks nothing."""


def _divergence(
    ordered: list[Branch], seen: tuple[str, ...], seen_c: list[Comparable], tools: list[dict[str, Any]] | None
) -> str:
    """Why the request continues no branch: `UNRELATED`, or how it departs from the newest branch
    with which it shares a message other than the system messages."""
    first = next((i for i, c in enumerate(seen_c) if c[0] != "system"), len(seen_c))
    own = set(seen[first:])
    related = [b for b in ordered if own.intersection(b.expected[first:])]
    if not related:
        return UNRELATED
    branch = related[0]
    if tools != branch.tools:
        return "tools_changed"
    n = len(branch.expected)
    if len(seen) <= n:
        return "history_truncated" if seen != branch.expected[: len(seen)] else "resent_without_reply"
    if seen[:n] != branch.expected:
        return "history_edited"
    return "foreign_assistant_message"


def _copy(recorder: TranscriptRecorder) -> TranscriptRecorder:
    """A private copy of a record, so planning changes nothing: each list and dict it holds is
    copied (the recorder only appends to them and never changes an element in place), in
    microseconds where a deep copy of a long record takes tens of milliseconds."""
    clone = copy.copy(recorder)
    for name, value in vars(recorder).items():
        if isinstance(value, list | dict):
            setattr(clone, name, copy.copy(value))
    return clone


def _with_next_state(branch: Branch, next_state: list[dict[str, Any]]) -> Finished | None:
    """The branch's waiting turn, cut from its OLD record (its sampled tokens, exactly), with
    `next_state` as the messages that followed it."""
    if branch.waiting is None:
        return None
    record = branch.recorder.trajectories()[-1]
    if not record.turns:
        return None
    cut = cut_turn(record, len(record.turns) - 1)
    cut.messages = [*cut.messages, *copy.deepcopy(next_state)]
    return cut, branch.waiting


def _hollow_finished(recorder: TranscriptRecorder) -> None:
    """Earlier sequences of a record (split by a template that rewrites history) were cut when their
    turn finished; keep only their index, so a session holds one sequence's tokens."""
    recorder.finished = [
        t if not t.tokens else Trajectory(sequence_index=t.sequence_index) for t in recorder.finished
    ]
