"""A conversation's history as the session machinery compares it (pure logic, no I/O).

Messages arrive in the `Conversation` form (environments/proxy/conversation.py): tool-call
arguments as JSON text. Here they become:
- `comparable(message)`: what must stay the same for a re-sent message to count as the one sent
  before (role, text, tool-call id, calls with arguments compared as parsed JSON); reasoning and
  SDK extras are ignored, since clients keep or drop them freely;
- `message_digest` / `history_digest`: fixed-size digests of those, so a session remembers the
  history it expects as 64-character strings, not as a copy of every message's text;
- `template_form(messages)`: what a Hugging Face chat template expects (arguments as objects, each
  tool result named after the call it answers).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

Comparable = tuple[Any, ...]


def _text(content: Any) -> str:
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return content if isinstance(content, str) else ""


def _arguments(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value) if value.strip() else {}
        except (ValueError, RecursionError):  # not JSON, or nested past what Python parses: as written
            return value
    return value if value is not None else {}


def _function(call: Any) -> dict[str, Any]:
    function = call.get("function") if isinstance(call, dict) else None
    return function if isinstance(function, dict) else {}


def comparable(message: dict[str, Any]) -> Comparable:
    """(role, text, tool_call_id, ((call id, name, arguments as sorted JSON), ...))."""
    calls = tuple(
        (
            str(c.get("id")),
            str(_function(c).get("name")),
            json.dumps(_arguments(_function(c).get("arguments")), sort_keys=True, default=str),
        )
        for c in message.get("tool_calls") or []
        if isinstance(c, dict)
    )
    role = "system" if message.get("role") == "developer" else message.get("role")
    return (role, _text(message.get("content")), message.get("tool_call_id"), calls)


def message_digest(message: Comparable) -> str:
    return hashlib.sha256(json.dumps(message, default=str).encode()).hexdigest()


@dataclass(frozen=True)
class HistoryKeys:
    """A request's messages as the session table compares them: each one's comparable form and its
    digest, in order."""

    comparables: list[Comparable]
    digests: list[str]


def history_keys(messages: list[dict[str, Any]]) -> HistoryKeys:
    """`comparable` and `message_digest` of every message (for a long history, computed in a worker
    thread: hashing thousands of messages would hold up the event loop)."""
    comparables = [comparable(m) for m in messages]
    return HistoryKeys(comparables, [message_digest(c) for c in comparables])


def history_digest(owner: str, message_digests: list[str] | tuple[str, ...]) -> str:
    """One owner's history (its messages' digests, in order) as one digest: the lookup key."""
    h = hashlib.sha256(owner.encode() + b"\x00")
    for d in message_digests:
        h.update(d.encode())
    return h.hexdigest()


def template_form(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Conversation messages -> chat-template messages (a fresh copy; the input is not changed)."""
    names: dict[str, str] = {}
    out: list[dict[str, Any]] = []
    for message in messages:
        role = "system" if message.get("role") == "developer" else message.get("role")
        converted: dict[str, Any] = {"role": role, "content": _text(message.get("content"))}
        if message.get("reasoning_content"):
            converted["reasoning_content"] = _text(message["reasoning_content"])
        if message.get("tool_calls"):
            converted["tool_calls"] = []
            for call in message["tool_calls"]:
                if not isinstance(call, dict):
                    continue
                function = _function(call)
                names[str(call.get("id"))] = str(function.get("name"))
                converted["tool_calls"].append(
                    {
                        "id": call.get("id"),
                        "type": "function",
                        "function": {
                            "name": str(function.get("name")),
                            "arguments": _arguments(function.get("arguments")),
                        },
                    }
                )
        if role == "tool":
            converted["tool_call_id"] = message.get("tool_call_id")
            converted["name"] = message.get("name") or names.get(str(message.get("tool_call_id")), "tool")
        elif message.get("name"):
            converted["name"] = message["name"]
        out.append(converted)
    return out


def rerenders(ours: Comparable, theirs: Comparable) -> bool:
    """Whether the assistant message `theirs` plausibly re-renders our reply `ours` in another form
    (smolagents: "Calling tools: [{'id': ..., ...}]" as plain text): every tool-call id we gave
    appears in its text, or, for a reply without tool calls, our non-empty text does."""
    if theirs[0] != "assistant" or ours[0] != "assistant":
        return False
    text = theirs[1] + "".join(f" {c[0]} {c[1]} {c[2]}" for c in theirs[3])
    if ours[3]:
        return all(call_id and call_id != "None" and call_id in text for call_id, _, _ in ours[3])
    return bool(ours[1].strip()) and ours[1].strip() in text
