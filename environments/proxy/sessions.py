"""The proxy's table of live sessions: found by the client's own session header or by the history it
re-sends, one lock per session, bounded per key and in total, in sessions and in tokens held
(I/O-free; the server calls it and owns the clock's schedule). docs/proxy/sessions.md."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from environments.proxy.conversation import Caller, Conversation
from environments.proxy.history import HistoryKeys, history_digest, history_keys, rerenders
from environments.proxy.proxy_config import SESSION_HEADER, ProxyConfig
from environments.proxy.session import Branch, SessionState

SESSION_HEADERS = ("session-id", "X-Claude-Code-Session-Id", SESSION_HEADER)
"""The session headers read, first found wins: Codex CLI's own, Claude Code's own, then ours."""
MAX_SESSION_ID_CHARS = 256

Key = tuple[str, str]


def session_id_from_headers(headers: Mapping[str, str] | Iterable[tuple[str, str]]) -> str | None:
    """The session a request names: the client's own header where it sends one (Codex CLI
    `session-id`, Claude Code `X-Claude-Code-Session-Id`), then `X-Session-Id`. Header names are
    matched case-insensitively, the first of repeated headers counts; a value that is empty, longer
    than 256 characters or holds control characters is ignored."""
    items = headers.items() if isinstance(headers, Mapping) else headers
    first: dict[str, str] = {}
    for name, value in items:
        first.setdefault(str(name).lower(), value)
    for name in SESSION_HEADERS:
        value = first.get(name.lower())
        if isinstance(value, str):
            value = value.strip()
            if 0 < len(value) <= MAX_SESSION_ID_CHARS and value.isprintable():
                return value
    return None


@dataclass(eq=False)
class HeldSession:
    """A session as the table holds it: its state, its lock, when it was last used."""

    state: SessionState
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    last_used: float = field(default_factory=time.monotonic)

    @property
    def owner(self) -> str:
        return self.state.owner

    @property
    def key(self) -> Key:
        return (self.state.owner, self.state.session_id)


class SessionTable:
    """Sessions keyed by (owner, id); `owner` is the API key's name, so keys never share sessions."""

    def __init__(
        self,
        tokenizer: Any,
        *,
        max_sessions: int = 4096,
        max_sessions_per_key: int | None = None,
        max_branches: int = 4,
        max_session_tokens: int = 65536,
        max_held_tokens: int = 8_000_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.tokenizer = tokenizer
        self.max_sessions = max_sessions
        self.max_sessions_per_key = max_sessions_per_key or max_sessions
        self.max_branches = max_branches
        self.max_session_tokens = max_session_tokens
        self.max_held_tokens = max_held_tokens
        self.clock = clock
        self.sessions: OrderedDict[Key, HeldSession] = OrderedDict()
        """Every session held, the least recently used first."""
        self.counts: Counter[str] = Counter()
        self.tokens_held = 0
        self.tokens_released = 0
        """Tokens of the sessions ended so far (their records' memory is free)."""
        self._tokens: dict[Key, int] = {}
        self._owner_tokens: Counter[str] = Counter()
        self._owner_sessions: Counter[str] = Counter()
        """Admitted sessions per owner (those counted against the caps)."""
        self._pending: Counter[str] = Counter()
        """Named sessions per owner that no request has committed to yet."""
        self._by_reply: dict[str, list[Key]] = {}
        """History digest (a branch's request and our reply) -> sessions expecting it re-sent."""
        self._by_request: dict[str, list[Key]] = {}
        """History digest (a branch's request, without our reply) -> sessions (re-rendering clients)."""
        self._indexed: dict[Key, list[tuple[dict[str, list[Key]], str]]] = {}
        self._continued: dict[str, Key] = {}
        """History digest -> the session that continued it (to tell a second client apart)."""
        self._continued_of: dict[Key, list[str]] = {}

    @classmethod
    def from_config(cls, tokenizer: Any, config: ProxyConfig) -> SessionTable:
        return cls(
            tokenizer,
            max_sessions=config.max_sessions,
            max_sessions_per_key=config.max_sessions_per_key,
            max_branches=config.max_branches_per_session,
            max_session_tokens=config.max_session_tokens,
            max_held_tokens=config.max_held_tokens,
        )

    def __len__(self) -> int:
        return len(self.sessions)

    # -- lookup --------------------------------------------------------------------------------
    def resolve(
        self, caller: Caller, conversation: Conversation, keys: HistoryKeys | None = None
    ) -> tuple[HeldSession, bool]:
        """(the session, whether it was just created). A no-train caller gets a transient private
        session, never held and never matched by history. With a session id: that session. Without
        one: the session expecting this history re-sent (up to its last assistant message), or whose
        last request it re-sends with our reply re-rendered; else a new session, held only once a
        turn is committed to it. `keys`: the messages' `history_keys`, when already computed."""
        owner = caller.owner
        if not caller.may_train:
            return self._held(self._state(owner, f"private-{uuid.uuid4().hex[:16]}", private=True)), True
        if caller.session_id:
            key = (owner, caller.session_id)
            held = self.sessions.get(key)
            if held is not None:
                self._touch(held)
                return held, False
            self._drop_pending(owner)
            held = self._held(self._state(owner, caller.session_id, named=True))
            self.sessions[key] = held
            self._pending[owner] += 1
            return held, True
        origin = None
        keys = keys or history_keys(conversation.messages)
        seen_c = keys.comparables
        last = max((i for i, c in enumerate(seen_c) if c[0] == "assistant"), default=-1)
        if last >= 0:
            seen = keys.digests[: last + 1]
            digest = history_digest(owner, seen)
            for key in self._by_reply.get(digest, ()):
                held = self.sessions.get(key)
                if held is not None:
                    self._touch(held)
                    return held, False
            found = [
                held
                for key in self._by_request.get(history_digest(owner, seen[:last]), ())
                if (held := self.sessions.get(key)) is not None
                and any(_rerendered_by(b, seen, seen_c[last]) for b in held.state.branches)
            ]
            if len(found) == 1:
                self._touch(found[0])
                return found[0], False
            if len(found) > 1:
                origin = "history_ambiguous"
            elif digest in self._continued:
                origin = "history_already_continued"
        auto = f"auto-{uuid.uuid4().hex[:16]}"
        return self._held(self._state(owner, auto, origin=origin)), True

    def find(self, owner: str, session_id: str) -> HeldSession | None:
        return self.sessions.get((owner, session_id))

    def _state(
        self,
        owner: str,
        session_id: str,
        *,
        named: bool = False,
        private: bool = False,
        origin: str | None = None,
    ) -> SessionState:
        state = SessionState(
            session_id,
            self.tokenizer,
            owner=owner,
            named=named,
            private=private,
            origin=origin,
            max_branches=self.max_branches,
            max_tokens=self.max_session_tokens,
        )
        if private:
            state.on_commit = lambda _s, _t, _n, counts: self.counts.update(counts)
        else:
            state.on_commit = self._committed
            state.spawn = self._spawn
        return state

    def _held(self, state: SessionState) -> HeldSession:
        held = HeldSession(state, last_used=self.clock())
        state.holder = held
        return held

    def _spawn(self, source: SessionState) -> SessionState:
        return self._state(source.owner, f"auto-{uuid.uuid4().hex[:16]}", origin=source.origin)

    def _touch(self, held: HeldSession) -> None:
        held.last_used = self.clock()
        self.sessions.move_to_end(held.key)

    # -- after a commit ------------------------------------------------------------------------
    def _committed(
        self, source: SessionState, target: SessionState, new: Branch | None, counts: Counter
    ) -> None:
        """Hold what a commit produced within the bounds, index it, count it."""
        for state in {id(source): source, id(target): target}.values():
            key = (state.owner, state.session_id)
            held = self.sessions.get(key)
            if held is not None and held.state is not state:
                continue  # a detached state (its session was ended meanwhile): nothing of it is held
            if state.branches and not state.admitted:
                if not self._admit(state, counts):
                    state.branches = []  # only this request's new turn: served, not recorded
                    counts["turns_not_recorded_session_cap"] += 1
                    if held is not None:
                        self._forget(held)
                    continue
                if held is None:
                    held = state.holder if state.holder is not None else self._held(state)
                    self.sessions[key] = held
            if held is None:
                continue
            self._touch(held)
            self._account(held)
            if not state.branches and not state.named:
                self._forget(held)  # a session found by its history with nothing left to continue
            else:
                self._index(held)
        if new is not None and new in target.branches:
            self._hold_within_total(target, new, counts)
        self.counts.update(counts)

    def _admit(self, state: SessionState, counts: Counter) -> bool:
        """Count a new session against the caps, making room by evicting idle sessions: the owner's
        own at its per-key cap; at the global cap, the oldest of an owner holding more sessions than
        this one (or this owner's own), so one key cannot push out another's sessions."""
        owner = state.owner
        while self._owner_sessions[owner] >= self.max_sessions_per_key:
            victim = self._oldest(lambda h: h.owner == owner, state)
            if victim is None:
                return False
            self._evict(victim, "key_cap")
        while sum(self._owner_sessions.values()) >= self.max_sessions:
            mine = self._owner_sessions[owner]
            victim = self._oldest(
                lambda h, mine=mine: h.owner == owner or self._owner_sessions[h.owner] > mine, state
            )
            if victim is None:
                return False
            self._evict(victim, "session_cap")
        state.admitted = True
        self._owner_sessions[owner] += 1
        if state.named:
            self._pending[owner] -= 1
        return True

    def _hold_within_total(self, target: SessionState, new: Branch, counts: Counter) -> None:
        """At most `max_held_tokens` in all sessions: evict the oldest idle session of an owner
        holding more tokens than this one (or this owner's own); else this turn is not kept."""
        owner = target.owner
        while self.tokens_held > self.max_held_tokens:
            mine = self._owner_tokens[owner]
            victim = self._oldest(
                lambda h, mine=mine: h.owner == owner or self._owner_tokens[h.owner] > mine, target
            )
            if victim is None:
                target.drop_branch(new, "memory", counts)
                held = self.sessions.get((target.owner, target.session_id))
                if held is not None and held.state is target:
                    self._account(held)
                    self._index(held)
                    if not target.branches and not target.named:
                        self._forget(held)
                return
            self._evict(victim, "memory")

    def _oldest(self, eligible: Callable[[HeldSession], bool], besides: SessionState) -> HeldSession | None:
        for held in self.sessions.values():
            if (
                held.state is not besides
                and held.state.admitted
                and not held.lock.locked()
                and eligible(held)
            ):
                return held
        return None

    def _evict(self, held: HeldSession, why: str) -> None:
        """Push a session out to make room; its waiting turns are counted as evicted."""
        self.counts[f"sessions_evicted_{why}"] += 1
        self.counts["turns_evicted"] += held.state.end()
        self._forget(held)

    # -- bookkeeping ---------------------------------------------------------------------------
    def _account(self, held: HeldSession) -> None:
        tokens = held.state.tokens
        before = self._tokens.get(held.key, 0)
        self._tokens[held.key] = tokens
        self._owner_tokens[held.owner] += tokens - before
        self.tokens_held += tokens - before

    def _index(self, held: HeldSession) -> None:
        self._unindex(held.key)
        entries: list[tuple[dict[str, list[Key]], str]] = []
        for branch in held.state.branches:
            entries.append((self._by_reply, history_digest(held.owner, branch.expected)))
            if branch.waiting is not None:
                entries.append((self._by_request, history_digest(held.owner, branch.expected[:-1])))
        for index, digest in entries:
            index.setdefault(digest, []).append(held.key)
        for digest in held.state.continued:
            self._continued[digest] = held.key
        self._indexed[held.key] = entries
        self._continued_of[held.key] = list(held.state.continued)

    def _unindex(self, key: Key) -> None:
        for index, digest in self._indexed.pop(key, []):
            keys = index.get(digest, [])
            if key in keys:
                keys.remove(key)
            if not keys:
                index.pop(digest, None)
        for digest in self._continued_of.pop(key, []):
            if self._continued.get(digest) == key:
                del self._continued[digest]

    def _forget(self, held: HeldSession) -> None:
        """Remove a session and every reference to it; its tokens are returned to the total."""
        key = held.key
        if self.sessions.get(key) is not held:
            return
        del self.sessions[key]
        self._unindex(key)
        tokens = self._tokens.pop(key, 0)
        self._owner_tokens[held.owner] -= tokens
        self.tokens_held -= tokens
        self.tokens_released += tokens
        if held.state.admitted:
            self._owner_sessions[held.owner] -= 1
        elif held.state.named:
            self._pending[held.owner] -= 1
        for counter in (self._owner_tokens, self._owner_sessions, self._pending):
            if counter[held.owner] <= 0:
                del counter[held.owner]
        held.state.ended = True

    def _drop_pending(self, owner: str) -> None:
        """Bound the named sessions no request has committed to yet (failed requests leave them)."""
        if self._pending[owner] < self.max_sessions_per_key:
            return
        for held in list(self.sessions.values()):
            if self._pending[owner] < self.max_sessions_per_key:
                break
            if held.owner == owner and not held.state.admitted and not held.lock.locked():
                self._forget(held)

    # -- ending --------------------------------------------------------------------------------
    def end(self, held: HeldSession, why: str) -> None:
        """Forget a session (call it under its lock); a turn still waiting for its next state ends
        without one (nothing to learn from it: no hint, no process reward), counted."""
        if held.state.private:
            return
        if self.sessions.get(held.key) is held:
            self.counts[f"sessions_ended_{why}"] += 1
        waiting = held.state.end()
        if waiting:
            self.counts[f"turns_ended_without_next_state_{why}"] += waiting
        self._forget(held)

    def sweep(self, idle_s: float) -> int:
        """End the sessions idle longer than `idle_s` that no request holds; return how many."""
        now = self.clock()
        stale = [h for h in self.sessions.values() if now - h.last_used > idle_s and not h.lock.locked()]
        for held in stale:
            self.end(held, "idle" if held.state.admitted else "unused")
        return len(stale)

    def end_all(self, why: str) -> None:
        for held in list(self.sessions.values()):
            self.end(held, why)


def _rerendered_by(branch: Branch, seen: list[str], assistant: Any) -> bool:
    p = len(branch.expected) - 1
    return (
        branch.waiting is not None
        and len(seen) == p + 1
        and tuple(seen[:p]) == branch.expected[:p]
        and seen[p] != branch.expected[p]
        and rerenders(branch.reply, assistant)
    )
