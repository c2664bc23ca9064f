"""The proxy's table of live sessions: lookup by header or by re-sent history, one lock per session,
idle expiry and a cap on how many are held (I/O-free; the server calls it)."""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from environments.proxy.openai_wire import comparable
from environments.proxy.session import SessionState


def history_key(owner: str, comparables: list[tuple[Any, ...]]) -> str:
    """A digest of a history (in `comparable` form) as one owner's client would re-send it."""
    return hashlib.sha256(json.dumps([owner, comparables], default=str).encode()).hexdigest()


@dataclass
class HeldSession:
    state: SessionState
    owner: str
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    last_used: float = field(default_factory=time.monotonic)
    history_key: str | None = None


class SessionTable:
    """Sessions keyed by (owner, id); `owner` is the API key's name, so keys never share sessions."""

    def __init__(self, tokenizer: Any, max_sessions: int) -> None:
        self.tokenizer = tokenizer
        self.max_sessions = max_sessions
        self.sessions: OrderedDict[tuple[str, str], HeldSession] = OrderedDict()
        self._by_history: dict[str, tuple[str, str]] = {}

    def resolve(
        self, owner: str, header_id: str | None, messages: list[dict[str, Any]]
    ) -> tuple[HeldSession, bool]:
        """(the session, whether it was just created). With a header: that session. Without one: the
        session whose expected history this request re-sends up to its last assistant message."""
        key: tuple[str, str] | None = (owner, header_id) if header_id else None
        if key is None:
            seen = [comparable(m) for m in messages]
            last = max((i for i, m in enumerate(seen) if m[0] == "assistant"), default=-1)
            if last >= 0:
                key = self._by_history.get(history_key(owner, seen[: last + 1]))
        if key is not None and key in self.sessions:
            held = self.sessions[key]
            self.sessions.move_to_end(key)
            held.last_used = time.monotonic()
            return held, False
        if key is None:
            key = (owner, f"auto-{uuid.uuid4().hex[:16]}")
        held = HeldSession(SessionState(key[1], self.tokenizer), owner)
        self.sessions[key] = held
        return held, True

    def remember_history(self, held: HeldSession) -> None:
        """Index the session by the history its client should re-send next (the fallback lookup)."""
        if held.history_key is not None:
            self._by_history.pop(held.history_key, None)
        held.history_key = history_key(held.owner, held.state.expected)
        self._by_history[held.history_key] = (held.owner, held.state.session_id)

    def remove(self, held: HeldSession) -> None:
        self.sessions.pop((held.owner, held.state.session_id), None)
        if held.history_key is not None:
            self._by_history.pop(held.history_key, None)

    def expired(self, idle_s: float) -> list[HeldSession]:
        """Sessions idle longer than `idle_s` (not in use), and the oldest beyond `max_sessions`."""
        now = time.monotonic()
        out = [h for h in self.sessions.values() if now - h.last_used > idle_s and not h.lock.locked()]
        excess = len(self.sessions) - len(out) - self.max_sessions
        for held in self.sessions.values():
            if excess <= 0:
                break
            if held not in out and not held.lock.locked():
                out.append(held)
                excess -= 1
        return out
