"""The session's answer as an Anthropic message and its stream events (pure logic, no I/O).

`MessageStream` turns the core's events (`ReasoningDelta`, `ContentDelta`, then one `TurnDone`)
into Anthropic's event sequence: `message_start`; per content block `content_block_start`, its
deltas (`thinking_delta`, `text_delta`, `input_json_delta`) and `content_block_stop`; then
`message_delta` (the `stop_reason` and the usage) and `message_stop`. A non-streamed answer is the
same machine's final message, so both forms say the same thing. Blocks: `thinking` (the model's
thinking; its `signature` is empty: nothing here signs it), `text`, then one `tool_use` per call.
The prompt's token count is known only when the answer is done: `message_start` says 0 input
tokens and `message_delta` carries the real count (the SDKs take the later value)."""

from __future__ import annotations

import json
import uuid
from typing import Any

from environments.proxy.conversation import (
    AssistantTurn,
    ContentDelta,
    ReasoningDelta,
    TurnDone,
    TurnEvent,
    WireError,
)
from environments.proxy.messages.errors import error_body

STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}
"""The core's finish reason as Anthropic's `stop_reason`. The core does not say which stop
sequence ended an answer, so a stop sequence reads as `end_turn`."""


def _input(arguments: str) -> dict[str, Any]:
    """A call's arguments as the `input` object (the core gives JSON text of an object; anything
    else is kept whole under `arguments` rather than failing the answer)."""
    try:
        value = json.loads(arguments) if arguments.strip() else {}
    except ValueError:
        return {"arguments": arguments}
    return value if isinstance(value, dict) else {"arguments": value}


class _Block:
    def __init__(self, index: int, kind: str) -> None:
        self.index = index
        self.kind = kind
        self.text = ""
        self.done: dict[str, Any] | None = None


class MessageStream:
    """The Messages events of one answer, in order; `message` is the final message object."""

    def __init__(self, model: str) -> None:
        self.model = model
        self.id = f"msg_{uuid.uuid4().hex}"
        self.blocks: list[_Block] = []
        self.open: _Block | None = None
        self.final: dict[str, Any] | None = None
        """The final message object, once the answer is done."""

    def _message(self, turn: AssistantTurn | None) -> dict[str, Any]:
        return {
            "id": self.id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": [b.done for b in self.blocks if b.done is not None],
            "stop_reason": STOP_REASONS[turn.finish_reason] if turn is not None else None,
            "stop_sequence": None,
            "usage": {
                "input_tokens": turn.prompt_tokens if turn is not None else 0,
                "output_tokens": turn.completion_tokens if turn is not None else 0,
                "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": 0,
            },
        }

    def start(self) -> list[dict[str, Any]]:
        return [{"type": "message_start", "message": self._message(None)}]

    def fail(self, error: WireError) -> list[dict[str, Any]]:
        """An error after the stream began: Anthropic's in-stream `error` event."""
        return [error_body(error)]

    def _open(self, kind: str, block: dict[str, Any]) -> list[dict[str, Any]]:
        item = _Block(len(self.blocks), kind)
        self.blocks.append(item)
        self.open = item
        return [{"type": "content_block_start", "index": item.index, "content_block": block}]

    def _delta(self, block: _Block, text: str) -> list[dict[str, Any]]:
        if not text:
            return []
        block.text += text
        delta = (
            {"type": "thinking_delta", "thinking": text}
            if block.kind == "thinking"
            else {"type": "text_delta", "text": text}
        )
        return [{"type": "content_block_delta", "index": block.index, "delta": delta}]

    def _close(self, block: _Block, final: str) -> list[dict[str, Any]]:
        events = self._delta(block, final[len(block.text) :]) if final.startswith(block.text) else []
        self.open = None
        if block.kind == "thinking":
            block.done = {"type": "thinking", "thinking": final, "signature": ""}
        else:
            block.done = {"type": "text", "text": final}
        return events + [{"type": "content_block_stop", "index": block.index}]

    def _find(self, kind: str) -> _Block | None:
        return next((b for b in self.blocks if b.kind == kind), None)

    def on(self, event: TurnEvent) -> list[dict[str, Any]]:
        """The Messages events for one of the core's events."""
        if isinstance(event, ReasoningDelta):
            block = self._find("thinking")
            if block is None:
                return self._open(
                    "thinking", {"type": "thinking", "thinking": "", "signature": ""}
                ) + self._delta(self.blocks[-1], event.text)
            return self._delta(block, event.text) if block is self.open else []
        if isinstance(event, ContentDelta):
            events: list[dict[str, Any]] = []
            if self.open is not None and self.open.kind == "thinking":
                events += self._close(self.open, self.open.text)
            block = self._find("text")
            if block is None:
                events += self._open("text", {"type": "text", "text": ""})
                block = self.blocks[-1]
            return events + (self._delta(block, event.text) if block is self.open else [])
        if isinstance(event, TurnDone):
            return self._finish(event.turn)
        raise TypeError(f"not a turn event: {event!r}")

    def _finish(self, turn: AssistantTurn) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        thinking = self._find("thinking")
        if thinking is not None and thinking.done is None:
            events += self._close(thinking, turn.reasoning or thinking.text)
        elif thinking is None and turn.reasoning:
            events += self._open("thinking", {"type": "thinking", "thinking": "", "signature": ""})
            events += self._close(self.blocks[-1], turn.reasoning)
        text = self._find("text")
        if text is None and (turn.content or not turn.tool_calls):
            events += self._open("text", {"type": "text", "text": ""})
            text = self.blocks[-1]
        if text is not None and text.done is None:
            events += self._close(text, turn.content)
        for call in turn.tool_calls:
            block = _Block(len(self.blocks), "tool_use")
            self.blocks.append(block)
            block.done = {
                "type": "tool_use",
                "id": call.id,
                "name": call.name,
                "input": _input(call.arguments),
            }
            events += [
                {
                    "type": "content_block_start",
                    "index": block.index,
                    "content_block": {**block.done, "input": {}},
                },
                {
                    "type": "content_block_delta",
                    "index": block.index,
                    "delta": {"type": "input_json_delta", "partial_json": json.dumps(block.done["input"])},
                },
                {"type": "content_block_stop", "index": block.index},
            ]
        self.final = self._message(turn)
        usage = {"input_tokens": turn.prompt_tokens, "output_tokens": turn.completion_tokens}
        return events + [
            {
                "type": "message_delta",
                "delta": {"stop_reason": self.final["stop_reason"], "stop_sequence": None},
                "usage": usage,
            },
            {"type": "message_stop"},
        ]
