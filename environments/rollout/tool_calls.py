"""Parse Hermes/Qwen `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` blocks.

Every block becomes one entry, in order: a `ToolCall` that may be dispatched, or a
`ToolCallError` that must not be, and that the model sees as an error tool result. A bad block
never discards the turn's other calls.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

OPEN_TAG = "<tool_call>"
CLOSE_TAG = "</tool_call>"
_MAX_CLOSE_TAG_PROBES = 8
"""How many later `</tool_call>` tags to try when the first one cuts a JSON string in half."""
_EXPECTED = 'expected <tool_call>{"name": "<tool name>", "arguments": {...}}</tool_call>'


@dataclass(frozen=True)
class ToolCall:
    """A well-formed call of a known tool."""

    name: str
    arguments: dict[str, Any]
    raw: str
    """The block exactly as generated, tags included."""
    id: str


@dataclass(frozen=True)
class ToolCallError:
    """A block that could not be turned into a call. Never dispatched."""

    raw: str
    reason: str
    id: str
    name: str | None = None
    """The tool name, when one could be read."""


ParsedCall = ToolCall | ToolCallError


@dataclass(frozen=True)
class ParsedTurn:
    """An assistant turn split into its text and its tool calls."""

    content: str
    """The text outside the tool-call blocks, stripped."""
    calls: list[ParsedCall] = field(default_factory=list)

    @property
    def valid_calls(self) -> list[ToolCall]:
        return [c for c in self.calls if isinstance(c, ToolCall)]

    @property
    def errors(self) -> list[ToolCallError]:
        return [c for c in self.calls if isinstance(c, ToolCallError)]


def parse_tool_calls(
    text: str, known_tools: Collection[str] | None = None, *, id_prefix: str | None = None
) -> ParsedTurn:
    """Split `text` into content and an ordered list of calls/errors.

    `known_tools`: names that may be called; any other name becomes an error (None: accept any).
    `id_prefix`: ids are `f"{id_prefix}_{index}"`; by default the prefix is random, so ids are
    unique across turns.
    """
    prefix = id_prefix if id_prefix is not None else f"call_{uuid.uuid4().hex[:8]}"
    pieces: list[str] = []
    blocks: list[tuple[str, str | None]] = []  # (raw block, JSON body or None if unclosed)
    unclosed_reasons: dict[int, str] = {}
    pos = 0
    while True:
        start = text.find(OPEN_TAG, pos)
        if start < 0:
            pieces.append(text[pos:])
            break
        pieces.append(text[pos:start])
        body_start = start + len(OPEN_TAG)
        end = text.find(CLOSE_TAG, body_start)
        next_open = text.find(OPEN_TAG, body_start)
        if end < 0:
            stop = next_open if next_open >= 0 else len(text)
            unclosed_reasons[len(blocks)] = f"unclosed {OPEN_TAG} tag: no {CLOSE_TAG} follows it"
            blocks.append((text[start:stop], None))
            pos = stop
            continue
        end = _best_close(text, body_start, end)
        if 0 <= next_open < end and not _is_json(text[body_start:end]):
            unclosed_reasons[len(blocks)] = (
                f"unclosed {OPEN_TAG} tag: a new {OPEN_TAG} began before {CLOSE_TAG}"
            )
            blocks.append((text[start:next_open], None))
            pos = next_open
            continue
        stop = end + len(CLOSE_TAG)
        blocks.append((text[start:stop], text[body_start:end]))
        pos = stop

    calls: list[ParsedCall] = []
    for index, (raw, body) in enumerate(blocks):
        if body is None:
            calls.append(ToolCallError(raw=raw, reason=f"{unclosed_reasons[index]}; {_EXPECTED}", id=""))
        else:
            calls.extend(_parse_body(raw, body, known_tools))
    numbered = [_with_id(call, f"{prefix}_{i}") for i, call in enumerate(calls)]
    return ParsedTurn(content="".join(pieces).strip(), calls=numbered)


def _with_id(call: ParsedCall, call_id: str) -> ParsedCall:
    if isinstance(call, ToolCall):
        return ToolCall(name=call.name, arguments=call.arguments, raw=call.raw, id=call_id)
    return ToolCallError(raw=call.raw, reason=call.reason, id=call_id, name=call.name)


def _is_json(body: str) -> bool:
    try:
        json.loads(body)
    except (ValueError, RecursionError):  # the model's text: nested too deeply is not JSON here
        return False
    return True


def _best_close(text: str, body_start: int, first_close: int) -> int:
    """The first `</tool_call>` whose body parses as JSON (a JSON string may itself contain the
    closing tag); the first one if none does."""
    if _is_json(text[body_start:first_close]):
        return first_close
    probe = first_close
    for _ in range(_MAX_CLOSE_TAG_PROBES):
        probe = text.find(CLOSE_TAG, probe + len(CLOSE_TAG))
        if probe < 0:
            break
        if _is_json(text[body_start:probe]):
            return probe
    return first_close


def _parse_body(raw: str, body: str, known_tools: Collection[str] | None) -> list[ParsedCall]:
    try:
        payload = json.loads(body)
    except (ValueError, RecursionError) as exc:
        return [ToolCallError(raw=raw, reason=f"tool call is not valid JSON ({exc}); {_EXPECTED}", id="")]
    if isinstance(payload, list) and payload:
        return [_parse_object(raw, item, known_tools) for item in payload]
    return [_parse_object(raw, payload, known_tools)]


def _parse_object(raw: str, payload: Any, known_tools: Collection[str] | None) -> ParsedCall:
    if not isinstance(payload, dict):
        kind = type(payload).__name__
        return ToolCallError(
            raw=raw, reason=f"tool call must be a JSON object, got {kind}; {_EXPECTED}", id=""
        )
    name = payload.get("name")
    if not isinstance(name, str) or not name.strip():
        return ToolCallError(raw=raw, reason=f'tool call has no "name" string; {_EXPECTED}', id="")
    if known_tools is not None and name not in known_tools:
        available = ", ".join(sorted(known_tools)) or "(none)"
        return ToolCallError(
            raw=raw, reason=f"unknown tool {name!r}; available tools: {available}", id="", name=name
        )
    if "arguments" not in payload and set(payload) - {"name", "id", "type"}:
        # `{"name": "write_file", "content": ...}`: the arguments are there, but not as arguments;
        # calling the tool with none would do something the model did not write
        others = sorted(set(payload) - {"name", "id", "type"})
        return ToolCallError(
            raw=raw, reason=f'tool call has {others} but no "arguments"; {_EXPECTED}', id="", name=name
        )
    arguments = payload.get("arguments", {})
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except (ValueError, RecursionError) as exc:
            return ToolCallError(
                raw=raw, reason=f'"arguments" is a string that is not valid JSON ({exc})', id="", name=name
            )
    if not isinstance(arguments, dict):
        kind = type(arguments).__name__
        return ToolCallError(
            raw=raw, reason=f'"arguments" must be a JSON object, got {kind}', id="", name=name
        )
    return ToolCall(name=name, arguments=arguments, raw=raw, id="")
