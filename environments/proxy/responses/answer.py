"""The session's answer as a Responses object and its stream events (pure logic, no I/O).

`ResponseStream` turns the core's events (`ReasoningDelta`, `ContentDelta`, then one `TurnDone`)
into OpenAI's event sequence, each with its `sequence_number`: `response.created`,
`response.in_progress`; per output item `response.output_item.added`, its deltas
(`response.reasoning_text.delta`, `response.output_text.delta` inside a content part,
`response.function_call_arguments.delta`), their `.done` events and `response.output_item.done`;
then `response.completed` (or `response.incomplete` when `max_output_tokens` cut the answer) with
the whole response. A non-streamed answer is the same machine's final response, so both forms say
the same thing. Output items: a `reasoning` item (the model's thinking), a `message` with one
`output_text` part, then one `function_call` item per tool call (`call_id` is the call's id), in
the order environments/proxy/part_stream.py gives every wire."""

from __future__ import annotations

import time
import uuid
from typing import Any

from environments.proxy.conversation import AssistantTurn, ToolCall, WireError
from environments.proxy.part_stream import Event, Part, PartStream
from environments.proxy.responses.errors import stream_error_code
from environments.proxy.responses.request import (
    FormatJsonObject,
    FormatJsonSchema,
    FunctionChoice,
    FunctionTool,
    ResponsesRequest,
)


def _id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


def _text_format(request: ResponsesRequest) -> dict[str, Any]:
    form = request.text.format if request.text is not None else None
    if isinstance(form, FormatJsonSchema):
        out: dict[str, Any] = {"type": "json_schema", "name": form.name, "schema": form.json_schema}
        if form.description is not None:
            out["description"] = form.description
        out["strict"] = form.strict
        return out
    if isinstance(form, FormatJsonObject):
        return {"type": "json_object"}
    return {"type": "text"}


def _usage(turn: AssistantTurn) -> dict[str, Any]:
    return {
        "input_tokens": turn.prompt_tokens,
        "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
        "output_tokens": turn.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": turn.prompt_tokens + turn.completion_tokens,
    }


ITEM_ID_PREFIXES = {"reasoning": "rs", "text": "msg", "call": "fc"}


class ResponseStream(PartStream):
    """The Responses events of one answer, in order; `final` is the final response object."""

    def __init__(self, request: ResponsesRequest) -> None:
        super().__init__()
        self.request = request
        self.id = _id("resp")
        self.created_at = int(time.time())
        self.sequence = 0

    # -- the response object -------------------------------------------------------------------
    def envelope(self, status: str, turn: AssistantTurn | None = None) -> dict[str, Any]:
        request = self.request
        choice = request.tool_choice
        incomplete = {"reason": "max_output_tokens"} if status == "incomplete" else None
        return {
            "id": self.id,
            "object": "response",
            "created_at": self.created_at,
            "status": status,
            "completed_at": int(time.time()) if status == "completed" else None,
            "error": None,
            "incomplete_details": incomplete,
            "instructions": request.instructions,
            "max_output_tokens": request.max_output_tokens,
            "model": request.model,
            "output": [part.done for part in self.parts if part.done is not None],
            "parallel_tool_calls": True
            if request.parallel_tool_calls is None
            else request.parallel_tool_calls,
            "previous_response_id": None,
            "reasoning": None,
            "store": False,
            "temperature": 1.0 if request.temperature is None else request.temperature,
            "text": {"format": _text_format(request)},
            "tool_choice": {"type": "function", "name": choice.name}
            if isinstance(choice, FunctionChoice)
            else choice,
            "tools": [
                t.model_dump(exclude_none=False) for t in request.tools or [] if isinstance(t, FunctionTool)
            ],
            "top_p": 1.0 if request.top_p is None else request.top_p,
            "truncation": "disabled",
            "usage": _usage(turn) if turn is not None else None,
            "user": None,
            "metadata": {},
        }

    # -- events --------------------------------------------------------------------------------
    def _event(self, kind: str, **fields: Any) -> dict[str, Any]:
        event = {"type": kind, "sequence_number": self.sequence, **fields}
        self.sequence += 1
        return event

    def start(self, prompt_tokens: int = 0) -> list[dict[str, Any]]:
        return [
            self._event("response.created", response=self.envelope("in_progress")),
            self._event("response.in_progress", response=self.envelope("in_progress")),
        ]

    # -- the part stream's hooks ---------------------------------------------------------------
    def _part_id(self, kind: str) -> str:
        return _id(ITEM_ID_PREFIXES[kind])

    def _opened(self, item: Part) -> list[Event]:
        if item.kind == "reasoning":
            added = {
                "id": item.id,
                "type": "reasoning",
                "summary": [],
                "content": [],
                "status": "in_progress",
            }
            return [self._event("response.output_item.added", output_index=item.index, item=added)]
        added = {
            "id": item.id,
            "type": "message",
            "role": "assistant",
            "status": "in_progress",
            "content": [],
        }
        return [
            self._event("response.output_item.added", output_index=item.index, item=added),
            self._event(
                "response.content_part.added",
                item_id=item.id,
                output_index=item.index,
                content_index=0,
                part={"type": "output_text", "text": "", "annotations": [], "logprobs": []},
            ),
        ]

    def _delta_events(self, item: Part, text: str) -> list[Event]:
        kind = "response.reasoning_text.delta" if item.kind == "reasoning" else "response.output_text.delta"
        extra = {} if item.kind == "reasoning" else {"logprobs": []}
        return [
            self._event(kind, item_id=item.id, output_index=item.index, content_index=0, delta=text, **extra)
        ]

    def _closed(self, item: Part, final: str) -> list[Event]:
        if item.kind == "reasoning":
            item.done = {
                "id": item.id,
                "type": "reasoning",
                "summary": [],
                "status": "completed",
                "content": [{"type": "reasoning_text", "text": final}],
            }
            return [
                self._event(
                    "response.reasoning_text.done",
                    item_id=item.id,
                    output_index=item.index,
                    content_index=0,
                    text=final,
                ),
                self._event("response.output_item.done", output_index=item.index, item=item.done),
            ]
        part = {"type": "output_text", "text": final, "annotations": [], "logprobs": []}
        item.done = {
            "id": item.id,
            "type": "message",
            "role": "assistant",
            "status": "completed",
            "content": [part],
        }
        return [
            self._event(
                "response.output_text.done",
                item_id=item.id,
                output_index=item.index,
                content_index=0,
                text=final,
                logprobs=[],
            ),
            self._event(
                "response.content_part.done",
                item_id=item.id,
                output_index=item.index,
                content_index=0,
                part=part,
            ),
            self._event("response.output_item.done", output_index=item.index, item=item.done),
        ]

    def _call(self, item: Part, call: ToolCall) -> list[Event]:
        added = {
            "id": item.id,
            "type": "function_call",
            "call_id": call.id,
            "name": call.name,
            "arguments": "",
            "status": "in_progress",
        }
        item.done = {**added, "arguments": call.arguments, "status": "completed"}
        return [
            self._event("response.output_item.added", output_index=item.index, item=added),
            self._event(
                "response.function_call_arguments.delta",
                item_id=item.id,
                output_index=item.index,
                delta=call.arguments,
            ),
            self._event(
                "response.function_call_arguments.done",
                item_id=item.id,
                output_index=item.index,
                name=call.name,
                arguments=call.arguments,
            ),
            self._event("response.output_item.done", output_index=item.index, item=item.done),
        ]

    def _ended(self, turn: AssistantTurn) -> list[Event]:
        status = "incomplete" if turn.finish_reason == "length" else "completed"
        self.final = self.envelope(status, turn)
        return [self._event(f"response.{status}", response=self.final)]

    def fail(self, error: WireError) -> list[dict[str, Any]]:
        """An error after the stream began: OpenAI's `error` event, then `response.failed`."""
        failed = self.envelope("failed")
        failed["error"] = {"code": stream_error_code(error), "message": error.message}
        return [
            self._event("error", code=stream_error_code(error), message=error.message, param=error.param),
            self._event("response.failed", response=failed),
        ]
