"""Chat Completions requests -> the one `Conversation` (pure logic, no I/O).

`parse_request` validates a decoded body or raises `WireError` with the OpenAI error fields
(message, param, code). Parameters the proxy does not act on (presence and frequency penalties,
user, metadata, parallel_tool_calls, ...) are accepted and ignored."""

from __future__ import annotations

import json
from typing import Any

from environments.proxy.conversation import (
    MAX_TOP_LOGPROBS,
    Conversation,
    NamedTool,
    OutputFormat,
    ToolChoice,
    WireError,
)

ROLES = frozenset({"system", "developer", "user", "assistant", "tool"})
TOOL_CHOICES = frozenset({"auto", "none", "required"})


def _number(body: dict[str, Any], name: str, default: float, low: float, high: float) -> float:
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
        raise WireError(f"'{name}' must be a number in [{low}, {high}], got {value!r:.40}", param=name)
    return float(value)


def _optional_int(body: dict[str, Any], name: str, low: int) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise WireError(f"'{name}' must be an integer >= {low}, got {value!r:.40}", param=name)
    return value


def _check_message(index: int, message: Any) -> None:
    param = f"messages[{index}]"
    if not isinstance(message, dict):
        raise WireError(f"{param} must be an object", param=param)
    role = message.get("role")
    if not isinstance(role, str) or role not in ROLES:
        raise WireError(
            f"{param}.role must be one of {sorted(ROLES)}, got {role!r:.40}", param=f"{param}.role"
        )
    content = message.get("content")
    if content is not None and not isinstance(content, str | list):
        raise WireError(f"{param}.content must be a string or a list of parts", param=f"{param}.content")
    if isinstance(content, list):
        for part in content:
            if (
                not isinstance(part, dict)
                or part.get("type") != "text"
                or not isinstance(part.get("text"), str)
            ):
                raise WireError(f"{param}.content: only text parts are supported", param=f"{param}.content")
    if role == "tool" and not isinstance(message.get("tool_call_id"), str):
        raise WireError(
            f"{param}: a tool message needs a 'tool_call_id' string", param=f"{param}.tool_call_id"
        )
    calls = message.get("tool_calls")
    if calls is not None:
        if role != "assistant" or not isinstance(calls, list):
            raise WireError(
                f"{param}.tool_calls must be a list on an assistant message", param=f"{param}.tool_calls"
            )
        for call in calls:
            function = call.get("function") if isinstance(call, dict) else None
            if not isinstance(function, dict) or not isinstance(function.get("name"), str):
                raise WireError(
                    f"{param}.tool_calls: each call needs function.name", param=f"{param}.tool_calls"
                )
    if role != "assistant" and content is None:
        raise WireError(f"{param}.content is required for role {role!r}", param=f"{param}.content")
    name = message.get("name")
    if name is not None and not isinstance(name, str):
        raise WireError(f"{param}.name must be a string", param=f"{param}.name")


def _check_tools(tools: Any) -> list[dict[str, Any]] | None:
    if tools is None:
        return None
    if not isinstance(tools, list):
        raise WireError("'tools' must be a list", param="tools")
    for index, tool in enumerate(tools):
        function = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(tool, dict) or tool.get("type") != "function" or not isinstance(function, dict):
            raise WireError(
                f"tools[{index}] must be {{'type': 'function', 'function': {{...}}}}", param=f"tools[{index}]"
            )
        if not isinstance(function.get("name"), str) or not function["name"]:
            raise WireError(
                f"tools[{index}].function.name must be a non-empty string", param=f"tools[{index}]"
            )
        parameters = function.get("parameters")
        if parameters is not None and not isinstance(parameters, dict):
            raise WireError(f"tools[{index}].function.parameters must be an object", param=f"tools[{index}]")
    return tools or None


def _tool_choice(value: Any, tools: list[dict[str, Any]] | None) -> ToolChoice:
    if value is None:
        return "auto"
    if isinstance(value, str):
        if value not in TOOL_CHOICES:
            raise WireError(
                f"tool_choice must be one of {sorted(TOOL_CHOICES)} or a function, got {value!r:.40}",
                param="tool_choice",
            )
        if value == "required" and not tools:
            raise WireError("tool_choice 'required' needs tools", param="tool_choice")
        return value  # type: ignore[return-value]
    function = value.get("function") if isinstance(value, dict) else None
    if (
        not isinstance(value, dict)
        or value.get("type") != "function"
        or not isinstance(function, dict)
        or not isinstance(function.get("name"), str)
    ):
        raise WireError(
            "tool_choice must be a string or {'type': 'function', 'function': {'name': ...}}",
            param="tool_choice",
        )
    name = function["name"]
    if name not in {t["function"]["name"] for t in tools or []}:
        raise WireError(f"tool_choice names {name!r:.80}, which is not among the tools", param="tool_choice")
    return NamedTool(name)


def _output_format(value: Any) -> OutputFormat | None:
    if value is None:
        return None
    kind = value.get("type") if isinstance(value, dict) else None
    if kind == "text":
        return None
    if kind == "json_object":
        return OutputFormat("json_object")
    if kind == "json_schema":
        spec = value.get("json_schema")
        if not isinstance(spec, dict) or not isinstance(spec.get("schema", {}), dict | bool):
            raise WireError(
                "response_format.json_schema must be an object with a 'schema'", param="response_format"
            )
        name = spec.get("name") if isinstance(spec.get("name"), str) else None
        schema = spec.get("schema", {})
        return OutputFormat("json_schema", schema if isinstance(schema, dict) else {}, name)
    raise WireError(
        "response_format.type must be 'text', 'json_object' or 'json_schema'", param="response_format"
    )


def parse_request(body: Any) -> tuple[Conversation, bool]:
    """A decoded body -> (the conversation, whether the stream ends with a usage chunk)."""
    if not isinstance(body, dict):
        raise WireError("the request body must be a JSON object")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise WireError("'model' is required", param="model")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise WireError("'messages' must be a non-empty list", param="messages")
    for index, message in enumerate(messages):
        _check_message(index, message)
    if messages[-1].get("role") == "assistant":
        raise WireError("the last message must not be an assistant message (no prefill)", param="messages")
    if body.get("n", 1) not in (1, None):
        raise WireError("only n=1 is supported", param="n")
    tools = _check_tools(body.get("tools"))
    stop = body.get("stop")
    stops = [stop] if isinstance(stop, str) else stop or []
    if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops):
        raise WireError("'stop' must be a string or a list of strings", param="stop")
    max_tokens = _optional_int(body, "max_completion_tokens", 1)
    if max_tokens is None:
        max_tokens = _optional_int(body, "max_tokens", 1)
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise WireError("'stream' must be a boolean", param="stream")
    options = body.get("stream_options") or {}
    conversation = Conversation(
        model=model,
        messages=conversation_messages(messages),
        tools=tools,
        tool_choice=_tool_choice(body.get("tool_choice"), tools),
        output_format=_output_format(body.get("response_format")),
        max_tokens=max_tokens,
        temperature=_number(body, "temperature", 1.0, 0.0, 2.0),
        top_p=_number(body, "top_p", 1.0, 0.0, 1.0),
        seed=_optional_int(body, "seed", 0),
        stop=stops,
        stream=stream,
        logprobs=_logprobs(body),
    )
    return conversation, bool(isinstance(options, dict) and options.get("include_usage"))


def _logprobs(body: dict[str, Any]) -> int | None:
    """`logprobs` and `top_logprobs` -> the conversation's `logprobs` (None: not asked)."""
    asked = body.get("logprobs")
    if asked is not None and not isinstance(asked, bool):
        raise WireError(f"'logprobs' must be a boolean, got {asked!r:.40}", param="logprobs")
    top = _optional_int(body, "top_logprobs", 0)
    if top is not None and top > MAX_TOP_LOGPROBS:
        raise WireError(f"'top_logprobs' must be at most {MAX_TOP_LOGPROBS}, got {top}", param="top_logprobs")
    if top and not asked:
        raise WireError("'top_logprobs' needs 'logprobs': true", param="top_logprobs")
    return (top or 0) if asked else None


def message_text(content: Any) -> str:
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content)
    return content or ""


def _arguments_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value if value is not None else {}, ensure_ascii=False)


def conversation_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """OpenAI messages -> the conversation's form (environments/proxy/conversation.py): text
    content, `developer` as `system`, tool-call arguments as JSON text, each tool result named after
    the call it answers, an assistant's `reasoning_content` kept."""
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
                converted["tool_calls"].append(
                    {
                        "id": call.get("id"),
                        "type": "function",
                        "function": {
                            "name": function["name"],
                            "arguments": _arguments_text(function.get("arguments")),
                        },
                    }
                )
        if role == "tool":
            converted["tool_call_id"] = message["tool_call_id"]
            converted["name"] = message.get("name") or names.get(message["tool_call_id"], "tool")
        elif message.get("name"):
            converted["name"] = message["name"]
        if role == "assistant" and isinstance(message.get("reasoning_content"), str):
            converted["reasoning_content"] = message["reasoning_content"]
        out.append(converted)
    return out
