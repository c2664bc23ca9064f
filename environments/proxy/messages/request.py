"""An Anthropic Messages request (`POST /v1/messages`) into the one conversation shape (pure
logic, no I/O).

The request types below are the part of Anthropic's `MessageCreateParams`
(anthropic/types/message_create_params.py) the proxy serves, with the SDK's field names: `system`
(a string or text blocks, and `system` messages inside `messages`, as Claude Code sends); messages of `text`, `tool_use`, `tool_result` (a string or text blocks,
`is_error`), `thinking` and `redacted_thinking` blocks; tools with `input_schema`; `tool_choice`
(`auto`, `any` (a call is required), `tool` (that one), `none`); `max_tokens` (required),
`stop_sequences`, `temperature`, `top_p` (and vLLM's `seed`); `output_config.format` (a JSON
schema). What the proxy
does not act on is accepted and ignored: `metadata`, `thinking`, `top_k`, `output_config.effort`,
`context_management`, `service_tier`, `cache_control` and `citations` on blocks, and any other key
(Claude Code sends several). Images and documents are refused: the model reads text.

An assistant message is one chat-template assistant message: its text, its thinking as
`reasoning_content` and its `tool_use` blocks as tool calls (the `input` object as JSON text). A
user message's `tool_result` blocks become tool messages, in order (one marked `is_error` begins with
`TOOL_ERROR_PREFIX`), and its text a user message."""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from environments.proxy.conversation import Conversation, NamedTool, OutputFormat, ToolChoice, WireError
from environments.proxy.validated_body import validated

MAX_STOP_SEQUENCES = 16


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)


class TextBlock(_Model):
    type: Literal["text"]
    text: str


class ToolUseBlock(_Model):
    type: Literal["tool_use"]
    id: str = Field(min_length=1)
    name: str = Field(min_length=1)
    input: dict[str, Any]


class ToolResultBlock(_Model):
    type: Literal["tool_result"]
    tool_use_id: str = Field(min_length=1)
    content: str | list[Annotated[TextBlock, Field(discriminator="type")]] | None = None
    is_error: bool | None = None


class ThinkingBlock(_Model):
    type: Literal["thinking"]
    thinking: str
    signature: str | None = None


class RedactedThinkingBlock(_Model):
    type: Literal["redacted_thinking"]
    data: str


Block = Annotated[
    TextBlock | ToolUseBlock | ToolResultBlock | ThinkingBlock | RedactedThinkingBlock,
    Field(discriminator="type"),
]


class Message(_Model):
    role: Literal["user", "assistant", "system"]
    """`system` inside `messages`: Claude Code sends one after the first user message (its
    mid-conversation system beta); it stays a system message at its position, text only."""
    content: str | list[Block]


class Tool(_Model):
    name: str = Field(min_length=1, max_length=128)
    description: str | None = None
    input_schema: dict[str, Any] | None = None
    type: str | None = None
    """Only client tools (`custom` or no type): Anthropic's server tools (`bash_…`,
    `web_search_…`) are refused by name."""


class ChoiceAuto(_Model):
    type: Literal["auto"]


class ChoiceAny(_Model):
    type: Literal["any"]


class ChoiceTool(_Model):
    type: Literal["tool"]
    name: str = Field(min_length=1)


class ChoiceNone(_Model):
    type: Literal["none"]


class JsonFormat(_Model):
    type: Literal["json_schema"]
    json_schema: dict[str, Any] = Field(alias="schema")


class OutputConfig(_Model):
    format: JsonFormat | None = None


class MessagesRequest(_Model):
    """The fields of a Messages request the proxy reads."""

    model: str = Field(min_length=1)
    max_tokens: int = Field(ge=1)
    messages: list[Message] = Field(min_length=1)
    system: str | list[Annotated[TextBlock, Field(discriminator="type")]] | None = None
    tools: list[Tool] | None = None
    tool_choice: (
        Annotated[ChoiceAuto | ChoiceAny | ChoiceTool | ChoiceNone, Field(discriminator="type")] | None
    ) = None
    stop_sequences: list[str] | None = Field(default=None, max_length=MAX_STOP_SEQUENCES)
    temperature: float | None = Field(default=None, ge=0.0, le=1.0)
    top_p: float | None = Field(default=None, ge=0.0, le=1.0)
    seed: int | None = Field(default=None, ge=0)
    """vLLM's extension (Anthropic's API has no seed): reproducible sampling for tests."""
    stream: bool | None = False
    output_config: OutputConfig | None = None


def _text(content: str | list[TextBlock] | None, joiner: str = "\n\n") -> str:
    if content is None:
        return ""
    return content if isinstance(content, str) else joiner.join(b.text for b in content)


def _only(index: int, role: str, block: Any, allowed: tuple[type, ...]) -> None:
    if not isinstance(block, allowed):
        raise WireError(
            f"messages[{index}]: a {block.type} block cannot be in a {role} message",
            param=f"messages[{index}].content",
        )


TOOL_ERROR_PREFIX = "Error: "
"""Put before a tool result the client marked `is_error`: chat templates have no field for it, so the
model (and the judge, which reads the same next state) is told in the text."""


def _tool_result_text(block: ToolResultBlock) -> str:
    text = _text(block.content)
    if block.is_error and not text.startswith(TOOL_ERROR_PREFIX):
        return TOOL_ERROR_PREFIX + text
    return text


def _user(index: int, message: Message, names: dict[str, str]) -> list[dict[str, Any]]:
    if isinstance(message.content, str):
        return [{"role": "user", "content": message.content}]
    out: list[dict[str, Any]] = []
    texts: list[str] = []
    for block in message.content:
        _only(index, "user", block, (TextBlock, ToolResultBlock))
        if isinstance(block, ToolResultBlock):
            tool: dict[str, Any] = {
                "role": "tool",
                "content": _tool_result_text(block),
                "tool_call_id": block.tool_use_id,
            }
            if block.tool_use_id in names:
                tool["name"] = names[block.tool_use_id]
            out.append(tool)
        else:
            texts.append(block.text)
    if texts or not out:
        out.append({"role": "user", "content": "\n\n".join(texts)})
    return out


def _system_text(index: int, message: Message) -> str:
    if isinstance(message.content, str):
        return message.content
    for block in message.content:
        _only(index, "system", block, (TextBlock,))
    return "\n\n".join(b.text for b in message.content)


def _assistant(index: int, message: Message, names: dict[str, str]) -> dict[str, Any]:
    if isinstance(message.content, str):
        return {"role": "assistant", "content": message.content}
    reply: dict[str, Any] = {"role": "assistant", "content": ""}
    thinking: list[str] = []
    for block in message.content:
        _only(index, "assistant", block, (TextBlock, ToolUseBlock, ThinkingBlock, RedactedThinkingBlock))
        if isinstance(block, TextBlock):
            reply["content"] += block.text
        elif isinstance(block, ThinkingBlock):
            thinking.append(block.thinking)
        elif isinstance(block, ToolUseBlock):
            names[block.id] = block.name
            reply.setdefault("tool_calls", []).append(
                {
                    "id": block.id,
                    "type": "function",
                    "function": {"name": block.name, "arguments": json.dumps(block.input)},
                }
            )
        # redacted thinking is encrypted elsewhere: nothing of it is text this model wrote
    if thinking:
        reply["reasoning_content"] = "".join(thinking)
    return reply


def _tools(request: MessagesRequest) -> list[dict[str, Any]] | None:
    if not request.tools:
        return None
    seen: set[str] = set()
    out = []
    for index, tool in enumerate(request.tools):
        if tool.name in seen:
            raise WireError(
                f"tools[{index}]: a second tool named {tool.name!r}", param=f"tools[{index}].name"
            )
        if tool.type not in (None, "custom"):
            raise WireError(
                f"tools[{index}]: server tools ({tool.type!r}) are not supported, only client tools",
                param=f"tools[{index}].type",
            )
        if tool.input_schema is None:
            raise WireError(f"tools[{index}].input_schema is required", param=f"tools[{index}].input_schema")
        seen.add(tool.name)
        function: dict[str, Any] = {"name": tool.name}
        if tool.description is not None:
            function["description"] = tool.description
        function["parameters"] = tool.input_schema
        out.append({"type": "function", "function": function})
    return out


def _tool_choice(request: MessagesRequest, names: set[str]) -> ToolChoice:
    choice = request.tool_choice
    if choice is None or isinstance(choice, ChoiceAuto):
        return "auto"
    if isinstance(choice, ChoiceNone):
        return "none"
    if not names:
        raise WireError(f"tool_choice {choice.type!r} needs at least one tool", param="tool_choice")
    if isinstance(choice, ChoiceAny):
        return "required"
    if choice.name not in names:
        raise WireError(
            f"tool_choice names {choice.name!r}, which is not among the tools", param="tool_choice.name"
        )
    return NamedTool(choice.name)


def to_conversation(request: MessagesRequest) -> Conversation:
    messages: list[dict[str, Any]] = []
    system = _text(request.system)
    if request.system is not None:
        messages.append({"role": "system", "content": system})
    names: dict[str, str] = {}
    for index, message in enumerate(request.messages):
        if message.role == "user":
            messages += _user(index, message, names)
        elif message.role == "system":
            messages.append({"role": "system", "content": _system_text(index, message)})
        else:
            messages.append(_assistant(index, message, names))
    if not any(m.role == "user" for m in request.messages):
        raise WireError("the messages hold no user message", param="messages")
    if request.messages[-1].role == "assistant":
        raise WireError(
            "the last message must be a user message (prefill is not supported)", param="messages"
        )
    tools = _tools(request)
    form = request.output_config.format if request.output_config is not None else None
    return Conversation(
        model=request.model,
        messages=messages,
        tools=tools,
        tool_choice=_tool_choice(request, {t["function"]["name"] for t in tools or []}),
        output_format=OutputFormat("json_schema", form.json_schema) if form is not None else None,
        max_tokens=request.max_tokens,
        temperature=1.0 if request.temperature is None else request.temperature,
        top_p=1.0 if request.top_p is None else request.top_p,
        seed=request.seed,
        stop=list(request.stop_sequences or []),
        stream=bool(request.stream),
    )


def parse_request(body: Any) -> tuple[MessagesRequest, Conversation]:
    """A decoded body into (the request, its conversation), or a WireError (400)."""
    request = validated(MessagesRequest, body)
    return request, to_conversation(request)


def parse_count_request(body: Any) -> Conversation:
    """A `count_tokens` body (a Messages request without `max_tokens`) into its conversation, or a
    WireError (400)."""
    if isinstance(body, dict) and "max_tokens" not in body:
        body = {**body, "max_tokens": 1}
    return to_conversation(validated(MessagesRequest, body))
