"""The answer as Chat Completions objects: the `chat.completion` body, the `chat.completion.chunk`
stream events and the error body (pure logic, no I/O)."""

from __future__ import annotations

import json
import time
from typing import Any

from environments.proxy.conversation import AssistantTurn, WireError

ERROR_TYPES = {
    "invalid_request": "invalid_request_error",
    "authentication": "invalid_request_error",
    "permission": "permission_error",
    "not_found": "invalid_request_error",
    "method_not_allowed": "invalid_request_error",
    "timeout": "invalid_request_error",
    "too_large": "invalid_request_error",
    "overloaded": "server_error",
    "upstream": "api_error",
}


def error_body(error: WireError) -> dict[str, Any]:
    return {
        "error": {
            "message": error.message,
            "type": ERROR_TYPES.get(error.kind, "invalid_request_error"),
            "param": error.param,
            "code": error.code,
        }
    }


def reply_message(turn: AssistantTurn) -> dict[str, Any]:
    """The assistant message of an answer (OpenAI form)."""
    message: dict[str, Any] = {
        "role": "assistant",
        "content": turn.content if turn.content or not turn.tool_calls else None,
    }
    if turn.reasoning is not None:
        message["reasoning_content"] = turn.reasoning
    if turn.tool_calls:
        message["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in turn.tool_calls
        ]
    return message


def usage(turn: AssistantTurn) -> dict[str, int]:
    return {
        "prompt_tokens": turn.prompt_tokens,
        "completion_tokens": turn.completion_tokens,
        "total_tokens": turn.prompt_tokens + turn.completion_tokens,
    }


def logprobs_field(entries: list[dict[str, Any]] | None) -> dict[str, Any] | None:
    """A choice's `logprobs`: None unless the client asked (environments/proxy/token_logprobs.py)."""
    return None if entries is None else {"content": entries, "refusal": None}


def completion_body(
    completion_id: str, model: str, turn: AssistantTurn, logprobs: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    """`logprobs`: every sampled token's entry, when the client asked for them."""
    return {
        "id": completion_id,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": reply_message(turn),
                "finish_reason": turn.finish_reason,
                "logprobs": logprobs_field(logprobs),
            }
        ],
        "usage": usage(turn),
    }


class ChunkWriter:
    """`chat.completion.chunk` events of one answer, as SSE `data:` lines. With `logprobs` asked,
    the entries given to `add_logprobs` go out on the next chunk written, so each sampled token's
    entry is sent once, on the chunk that carries its text or after it."""

    def __init__(self, completion_id: str, model: str, logprobs: bool = False) -> None:
        self.completion_id = completion_id
        self.model = model
        self.created = int(time.time())
        self.pending: list[dict[str, Any]] | None = [] if logprobs else None

    def add_logprobs(self, entries: list[dict[str, Any]]) -> None:
        if self.pending is not None:
            self.pending.extend(entries)

    def _take_logprobs(self) -> dict[str, Any] | None:
        taken, self.pending = self.pending, None if self.pending is None else []
        return logprobs_field(taken)

    def _event(self, body: dict[str, Any]) -> bytes:
        return f"data: {json.dumps(body, ensure_ascii=False, separators=(',', ':'))}\n\n".encode()

    def chunk(self, delta: dict[str, Any], finish: str | None = None) -> bytes:
        return self._event(
            {
                "id": self.completion_id,
                "object": "chat.completion.chunk",
                "created": self.created,
                "model": self.model,
                "choices": [
                    {"index": 0, "delta": delta, "finish_reason": finish, "logprobs": self._take_logprobs()}
                ],
            }
        )

    def role(self) -> bytes:
        return self.chunk({"role": "assistant", "content": ""})

    def content(self, text: str) -> bytes:
        return self.chunk({"content": text})

    def reasoning(self, text: str) -> bytes:
        return self.chunk({"reasoning_content": text})

    def end(self, turn: AssistantTurn, include_usage: bool) -> bytes:
        """Each tool call (whole, with its index), the finish reason, the usage when asked, [DONE]."""
        out = [
            self.chunk(
                {
                    "tool_calls": [
                        {
                            "index": i,
                            "id": c.id,
                            "type": "function",
                            "function": {"name": c.name, "arguments": c.arguments},
                        }
                    ]
                }
            )
            for i, c in enumerate(turn.tool_calls)
        ]
        out.append(self.chunk({}, turn.finish_reason))
        if include_usage:
            out.append(
                self._event(
                    {
                        "id": self.completion_id,
                        "object": "chat.completion.chunk",
                        "created": self.created,
                        "model": self.model,
                        "choices": [],
                        "usage": usage(turn),
                    }
                )
            )
        out.append(b"data: [DONE]\n\n")
        return b"".join(out)

    def error(self, error: WireError) -> bytes:
        """A failure after the stream began: one error event, then [DONE] (as vLLM does)."""
        return self._event(error_body(error)) + b"data: [DONE]\n\n"
