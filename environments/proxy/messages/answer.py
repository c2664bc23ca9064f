"""The session's answer as an Anthropic message and its stream events (pure logic, no I/O).

`MessageStream` turns the core's events (`ReasoningDelta`, `ContentDelta`, then one `TurnDone`)
into Anthropic's event sequence: `message_start`; per content block `content_block_start`, its
deltas (`thinking_delta`, `text_delta`, `input_json_delta`) and `content_block_stop`; then
`message_delta` (the `stop_reason` and the usage) and `message_stop`. A non-streamed answer is the
same machine's final message, so both forms say the same thing. Blocks: `thinking` (the model's
thinking; its `signature` is empty: nothing here signs it), `text`, then one `tool_use` per call,
in the order environments/proxy/part_stream.py gives every wire.
`message_start` carries the prompt's token count (the core's `AnswerStarted`), and `message_delta`
the answer's."""

from __future__ import annotations

import json
import uuid
from typing import Any

from environments.proxy.conversation import AssistantTurn, ToolCall, WireError
from environments.proxy.messages.errors import error_body
from environments.proxy.part_stream import Event, Part, PartStream

STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}
"""The core's finish reason as Anthropic's `stop_reason` (`stop_sequence` when one of the client's
stop sequences ended the answer)."""


def _stop_reason(turn: AssistantTurn) -> str:
    return "stop_sequence" if turn.stop_sequence is not None else STOP_REASONS[turn.finish_reason]


def _input(arguments: str) -> dict[str, Any]:
    """A call's arguments as the `input` object (the core gives JSON text of an object; anything
    else is kept whole under `arguments` rather than failing the answer)."""
    try:
        value = json.loads(arguments) if arguments.strip() else {}
    except ValueError:
        return {"arguments": arguments}
    return value if isinstance(value, dict) else {"arguments": value}


class MessageStream(PartStream):
    """The Messages events of one answer, in order; `final` is the final message object."""

    def __init__(self, model: str) -> None:
        super().__init__()
        self.model = model
        self.id = f"msg_{uuid.uuid4().hex}"

    def _message(self, turn: AssistantTurn | None, prompt_tokens: int = 0) -> dict[str, Any]:
        return {
            "id": self.id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": [p.done for p in self.parts if p.done is not None],
            "stop_reason": _stop_reason(turn) if turn is not None else None,
            "stop_sequence": turn.stop_sequence if turn is not None else None,
            "usage": {
                "input_tokens": turn.prompt_tokens if turn is not None else prompt_tokens,
                "output_tokens": turn.completion_tokens if turn is not None else 0,
                "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": 0,
            },
        }

    def start(self, prompt_tokens: int = 0) -> list[Event]:
        return [{"type": "message_start", "message": self._message(None, prompt_tokens)}]

    def fail(self, error: WireError) -> list[Event]:
        """An error after the stream began: Anthropic's in-stream `error` event."""
        return [error_body(error)]

    @staticmethod
    def _block(part: Part, text: str) -> dict[str, Any]:
        if part.kind == "reasoning":
            return {"type": "thinking", "thinking": text, "signature": ""}
        return {"type": "text", "text": text}

    # -- the part stream's hooks ---------------------------------------------------------------
    def _opened(self, part: Part) -> list[Event]:
        return [{"type": "content_block_start", "index": part.index, "content_block": self._block(part, "")}]

    def _delta_events(self, part: Part, text: str) -> list[Event]:
        delta = (
            {"type": "thinking_delta", "thinking": text}
            if part.kind == "reasoning"
            else {"type": "text_delta", "text": text}
        )
        return [{"type": "content_block_delta", "index": part.index, "delta": delta}]

    def _closed(self, part: Part, final: str) -> list[Event]:
        part.done = self._block(part, final)
        return [{"type": "content_block_stop", "index": part.index}]

    def _call(self, part: Part, call: ToolCall) -> list[Event]:
        part.done = {"type": "tool_use", "id": call.id, "name": call.name, "input": _input(call.arguments)}
        return [
            {"type": "content_block_start", "index": part.index, "content_block": {**part.done, "input": {}}},
            {
                "type": "content_block_delta",
                "index": part.index,
                "delta": {"type": "input_json_delta", "partial_json": json.dumps(part.done["input"])},
            },
            {"type": "content_block_stop", "index": part.index},
        ]

    def _ended(self, turn: AssistantTurn) -> list[Event]:
        self.final = self._message(turn)
        usage = {"input_tokens": turn.prompt_tokens, "output_tokens": turn.completion_tokens}
        return [
            {
                "type": "message_delta",
                "delta": {"stop_reason": self.final["stop_reason"], "stop_sequence": turn.stop_sequence},
                "usage": usage,
            },
            {"type": "message_stop"},
        ]
