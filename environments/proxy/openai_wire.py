"""The OpenAI chat-completions wire format, as the proxy speaks it (pure logic, no I/O).

`parse_request` validates a request body into a `ChatRequest` or raises `RequestError` with the
OpenAI error shape's fields (status, message, param, code); `completion_body`, `stream_chunks` and
`error_body` build what goes back. Parameters the proxy does not act on (logprobs, presence and
frequency penalties, user, metadata, ...) are accepted and ignored (docs/proxy.md lists them)."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

from hermes_opd.contract.errors import HermesOPDError

ROLES = frozenset({"system", "developer", "user", "assistant", "tool"})
TOOL_CHOICES = frozenset({"auto", "none"})


class RequestError(HermesOPDError, ValueError):
    """A request the proxy refuses, with the HTTP status and OpenAI error fields to answer with."""

    def __init__(self, message: str, *, status: int = 400, param: str | None = None,
                 code: str | None = None, kind: str = "invalid_request_error") -> None:  # fmt: skip
        super().__init__(message)
        self.status = status
        self.param = param
        self.code = code
        self.kind = kind


def error_body(message: str, kind: str = "invalid_request_error", param: str | None = None,
               code: str | None = None) -> dict[str, Any]:  # fmt: skip
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


@dataclass(frozen=True)
class ChatRequest:
    """A validated chat-completions request."""

    model: str
    messages: list[dict[str, Any]]
    """As sent (OpenAI form); `template_messages` converts them for the chat template."""
    tools: list[dict[str, Any]] | None
    tool_choice: str
    max_tokens: int | None
    temperature: float
    top_p: float
    seed: int | None
    stop: list[str] = field(default_factory=list)
    stream: bool = False
    include_usage: bool = False

    @property
    def tool_names(self) -> set[str]:
        return {t["function"]["name"] for t in self.tools or []}


def _number(body: dict[str, Any], name: str, default: float, low: float, high: float) -> float:
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
        raise RequestError(f"'{name}' must be a number in [{low}, {high}], got {value!r}", param=name)
    return float(value)


def _optional_int(body: dict[str, Any], name: str, low: int) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise RequestError(f"'{name}' must be an integer >= {low}, got {value!r}", param=name)
    return value


def _check_message(index: int, message: Any) -> None:
    param = f"messages[{index}]"
    if not isinstance(message, dict):
        raise RequestError(f"{param} must be an object", param=param)
    role = message.get("role")
    if role not in ROLES:
        raise RequestError(
            f"{param}.role must be one of {sorted(ROLES)}, got {role!r}", param=f"{param}.role"
        )
    content = message.get("content")
    if content is not None and not isinstance(content, str | list):
        raise RequestError(f"{param}.content must be a string or a list of parts", param=f"{param}.content")
    if isinstance(content, list):
        for part in content:
            if (
                not isinstance(part, dict)
                or part.get("type") != "text"
                or not isinstance(part.get("text"), str)
            ):
                raise RequestError(
                    f"{param}.content: only text parts are supported", param=f"{param}.content"
                )
    if role == "tool" and not isinstance(message.get("tool_call_id"), str):
        raise RequestError(
            f"{param}: a tool message needs a 'tool_call_id' string", param=f"{param}.tool_call_id"
        )
    calls = message.get("tool_calls")
    if calls is not None:
        if role != "assistant" or not isinstance(calls, list):
            raise RequestError(
                f"{param}.tool_calls must be a list on an assistant message", param=f"{param}.tool_calls"
            )
        for call in calls:
            function = call.get("function") if isinstance(call, dict) else None
            if not isinstance(function, dict) or not isinstance(function.get("name"), str):
                raise RequestError(
                    f"{param}.tool_calls: each call needs function.name", param=f"{param}.tool_calls"
                )
    if role != "assistant" and content is None:
        raise RequestError(f"{param}.content is required for role {role!r}", param=f"{param}.content")


def _check_tools(tools: Any) -> list[dict[str, Any]] | None:
    if tools is None:
        return None
    if not isinstance(tools, list):
        raise RequestError("'tools' must be a list", param="tools")
    for index, tool in enumerate(tools):
        function = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(tool, dict) or tool.get("type") != "function" or not isinstance(function, dict):
            raise RequestError(
                f"tools[{index}] must be {{'type': 'function', 'function': {{...}}}}", param=f"tools[{index}]"
            )
        if not isinstance(function.get("name"), str) or not function["name"]:
            raise RequestError(
                f"tools[{index}].function.name must be a non-empty string", param=f"tools[{index}]"
            )
    return tools or None


def parse_request(body: Any) -> ChatRequest:
    """Validate a decoded request body."""
    if not isinstance(body, dict):
        raise RequestError("the request body must be a JSON object")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise RequestError("'model' is required", param="model")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise RequestError("'messages' must be a non-empty list", param="messages")
    for index, message in enumerate(messages):
        _check_message(index, message)
    if messages[-1].get("role") == "assistant":
        raise RequestError("the last message must not be an assistant message (no prefill)", param="messages")
    n = body.get("n", 1)
    if n not in (1, None):
        raise RequestError("only n=1 is supported", param="n")
    tool_choice = body.get("tool_choice") or "auto"
    if tool_choice not in TOOL_CHOICES:
        raise RequestError(f"tool_choice must be 'auto' or 'none', got {tool_choice!r}", param="tool_choice")
    stop = body.get("stop")
    stops = [stop] if isinstance(stop, str) else stop or []
    if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops):
        raise RequestError("'stop' must be a string or a list of strings", param="stop")
    max_tokens = _optional_int(body, "max_completion_tokens", 1)
    if max_tokens is None:
        max_tokens = _optional_int(body, "max_tokens", 1)
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise RequestError("'stream' must be a boolean", param="stream")
    options = body.get("stream_options") or {}
    return ChatRequest(
        model=model,
        messages=messages,
        tools=_check_tools(body.get("tools")),
        tool_choice=tool_choice,
        max_tokens=max_tokens,
        temperature=_number(body, "temperature", 1.0, 0.0, 2.0),
        top_p=_number(body, "top_p", 1.0, 0.0, 1.0),
        seed=_optional_int(body, "seed", 0),
        stop=stops,
        stream=stream,
        include_usage=bool(isinstance(options, dict) and options.get("include_usage")),
    )


def message_text(content: Any) -> str:
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content)
    return content or ""


def _arguments(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value) if value.strip() else {}
        except ValueError:
            return value
    return value if value is not None else {}


def template_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """OpenAI messages -> what a Hugging Face chat template expects: text content, tool-call
    arguments as objects, each tool result named after the call it answers, `developer` as `system`."""
    names: dict[str, str] = {}
    out: list[dict[str, Any]] = []
    for message in messages:
        role = "system" if message["role"] == "developer" else message["role"]
        converted: dict[str, Any] = {"role": role, "content": message_text(message.get("content"))}
        if message.get("tool_calls"):
            converted["tool_calls"] = []
            for call in message["tool_calls"]:
                function = call["function"]
                names[str(call.get("id"))] = function["name"]
                converted["tool_calls"].append({"id": call.get("id"), "type": "function", "function": {
                    "name": function["name"], "arguments": _arguments(function.get("arguments"))}})  # fmt: skip
        if role == "tool":
            converted["tool_call_id"] = message["tool_call_id"]
            converted["name"] = message.get("name") or names.get(message["tool_call_id"], "tool")
        elif message.get("name"):
            converted["name"] = message["name"]
        out.append(converted)
    return out


def comparable(message: dict[str, Any]) -> tuple[Any, ...]:
    """What must stay the same for a re-sent message to count as the one sent before: its role,
    text, name, tool-call id and calls (arguments compared as parsed JSON). Other keys (`refusal`,
    `annotations`, ...) that SDKs add or drop are ignored."""
    calls = tuple(
        (
            str(c.get("id")),
            c["function"]["name"],
            json.dumps(_arguments(c["function"].get("arguments")), sort_keys=True),
        )
        for c in message.get("tool_calls") or []
    )
    role = "system" if message.get("role") == "developer" else message.get("role")
    return (role, message_text(message.get("content")), message.get("tool_call_id"), calls)


def assistant_reply(content: str, calls: list[tuple[str, str, dict[str, Any]]]) -> dict[str, Any]:
    """The assistant message of a reply (OpenAI form): `calls` are (id, name, arguments)."""
    message: dict[str, Any] = {"role": "assistant", "content": content if content or not calls else None}
    if calls:
        message["tool_calls"] = [
            {"id": i, "type": "function", "function": {"name": n, "arguments": json.dumps(a)}}
            for i, n, a in calls
        ]
    return message


def completion_body(completion_id: str, model: str, reply: dict[str, Any], finish_reason: str,
                    prompt_tokens: int, completion_tokens: int) -> dict[str, Any]:  # fmt: skip
    return {
        "id": completion_id,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": reply, "finish_reason": finish_reason, "logprobs": None}],
        "usage": _usage(prompt_tokens, completion_tokens),
    }


def _usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}  # fmt: skip


def stream_chunks(completion_id: str, model: str, reply: dict[str, Any], finish_reason: str,
                  usage: tuple[int, int] | None) -> list[dict[str, Any]]:  # fmt: skip
    """The reply as `chat.completion.chunk` objects: the role, the content, each tool call (whole,
    with its index), the finish reason, and the usage when it was asked for."""
    created = int(time.time())

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        body = {"id": completion_id, "object": "chat.completion.chunk", "created": created, "model": model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}]}  # fmt: skip
        return body

    chunks = [chunk({"role": "assistant", "content": ""})]
    if reply.get("content"):
        chunks.append(chunk({"content": reply["content"]}))
    for index, call in enumerate(reply.get("tool_calls") or []):
        chunks.append(chunk({"tool_calls": [{"index": index, **call}]}))
    chunks.append(chunk({}, finish_reason))
    if usage is not None:
        chunks.append({"id": completion_id, "object": "chat.completion.chunk", "created": created,
                       "model": model, "choices": [], "usage": _usage(*usage)})  # fmt: skip
    return chunks
