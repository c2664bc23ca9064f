"""A Responses request (`POST /v1/responses`) into the one conversation shape (pure logic, no I/O).

The request types below are the part of OpenAI's `ResponseCreateParams`
(openai/types/responses/response_create_params.py) the proxy serves, with the SDK's field names:
`instructions`; `input` as a string or as items (`message` with roles user/system/developer/
assistant and text parts, `function_call`, `function_call_output`, `reasoning`); function tools in
the Responses' flat form; `tool_choice`; `text.format`; `max_output_tokens`, `temperature`,
`top_p` (and vLLM's `seed`). A `namespace` tool's functions are offered by their own names;
hosted tools (`web_search`, ...) are left out of what the model sees. Keys the proxy does not act
on (`store`, `metadata`, `reasoning`, `parallel_tool_calls`, `truncation`, `user`, ...) are accepted
and ignored, and so is `include` but for the output text's logprobs, which this wire does not
return (a 400 that names Chat Completions, which does). The proxy keeps no responses:
`previous_response_id`, `conversation`, `prompt` and `background` are refused, so a client sends
its whole input each time (`store: false`), as Codex CLI does.

An assistant turn arrives as consecutive items (its `reasoning`, its `message`, its `function_call`s,
in any order); every run of assistant-side items becomes ONE assistant message (texts and
reasoning concatenated, calls in order), as the session recorded the turn, so the session goes on
without a fork. Leading system and developer messages (after `instructions`) become one system message."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag

from environments.proxy.conversation import (
    MAX_TOP_LOGPROBS,
    Conversation,
    NamedTool,
    OutputFormat,
    ToolChoice,
    WireError,
)
from environments.proxy.validated_body import validated


class _Part(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)


class InputText(_Part):
    type: Literal["input_text"]
    text: str


class OutputText(_Part):
    type: Literal["output_text"]
    text: str


class Refusal(_Part):
    type: Literal["refusal"]
    refusal: str


TextPart = Annotated[InputText | OutputText | Refusal, Field(discriminator="type")]
"""Text is all the proxy's model reads: image, file and audio parts are refused by their type."""


class MessageItem(_Part):
    type: Literal["message"] = "message"
    role: Literal["user", "system", "developer", "assistant"]
    content: str | list[TextPart]


class FunctionCallItem(_Part):
    type: Literal["function_call"]
    call_id: str = Field(min_length=1)
    name: str = Field(min_length=1)
    arguments: str


class FunctionCallOutputItem(_Part):
    type: Literal["function_call_output"]
    call_id: str = Field(min_length=1)
    output: str | list[TextPart]


class SummaryText(_Part):
    type: Literal["summary_text"]
    text: str


class ReasoningText(_Part):
    type: Literal["reasoning_text"]
    text: str


class ReasoningItem(_Part):
    type: Literal["reasoning"]
    summary: list[SummaryText] = []
    content: list[ReasoningText] | None = None


def _item_type(value: Any) -> str | None:
    if isinstance(value, dict):
        kind = value.get("type", "message")
        return kind if isinstance(kind, str) else None
    return None


InputItem = Annotated[
    Annotated[MessageItem, Tag("message")]
    | Annotated[FunctionCallItem, Tag("function_call")]
    | Annotated[FunctionCallOutputItem, Tag("function_call_output")]
    | Annotated[ReasoningItem, Tag("reasoning")],
    Discriminator(
        _item_type,
        custom_error_type="unsupported_item",
        custom_error_message="an input item must be an object whose type is one of 'message', "
        "'function_call', 'function_call_output', 'reasoning'",
    ),
]


class FunctionTool(_Part):
    type: Literal["function"]
    name: str = Field(min_length=1, max_length=128)
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class NamespaceTool(_Part):
    """A group of function tools under one name (Codex CLI sends its sub-agent tools this way); the
    model sees its functions by their own names."""

    type: Literal["namespace"]
    name: str = Field(min_length=1, max_length=128)
    description: str | None = None
    tools: list[FunctionTool] = Field(max_length=256)


class HostedTool(_Part):
    """A tool the provider runs itself (`web_search`, `file_search`, `code_interpreter`, ...). The
    proxy's model cannot call it, so it is left out of what the model sees, never refused: clients
    such as Codex CLI always send one."""

    type: str = Field(min_length=1, max_length=64)


HOSTED_TOOLS = frozenset(
    {
        "web_search",
        "web_search_preview",
        "web_search_2025_08_26",
        "web_search_preview_2025_03_11",
        "file_search",
        "code_interpreter",
        "image_generation",
        "computer",
        "computer_use_preview",
        "mcp",
        "local_shell",
        "shell",
        "apply_patch",
        "custom",
        "tool_search",
    }
)
"""The provider-run tool types of OpenAI's Responses API (left out of what the model sees); any
other type is a 400."""


def _tool_type(value: Any) -> str | None:
    if isinstance(value, dict) and isinstance(value.get("type"), str):
        kind = value["type"]
        if kind in ("function", "namespace"):
            return kind
        return "hosted" if kind in HOSTED_TOOLS else None
    return None


Tool = Annotated[
    Annotated[FunctionTool, Tag("function")]
    | Annotated[NamespaceTool, Tag("namespace")]
    | Annotated[HostedTool, Tag("hosted")],
    Discriminator(
        _tool_type,
        custom_error_type="unsupported_tool",
        custom_error_message="a tool must be an object whose type is 'function', 'namespace' or a hosted "
        "tool's type ('web_search', 'file_search', ...)",
    ),
]


class FunctionChoice(_Part):
    type: Literal["function"]
    name: str = Field(min_length=1)


class FormatText(_Part):
    type: Literal["text"]


class FormatJsonSchema(_Part):
    type: Literal["json_schema"]
    name: str = Field(min_length=1)
    json_schema: dict[str, Any] = Field(alias="schema")
    description: str | None = None
    strict: bool | None = None


class FormatJsonObject(_Part):
    type: Literal["json_object"]


class TextConfig(_Part):
    format: (
        Annotated[FormatText | FormatJsonSchema | FormatJsonObject, Field(discriminator="type")] | None
    ) = None


class ResponsesRequest(_Part):
    """The fields of a Responses request the proxy reads."""

    model: str = Field(min_length=1)
    input: str | list[InputItem]
    instructions: str | None = None
    tools: list[Tool] | None = Field(default=None, max_length=1024)
    tool_choice: Literal["auto", "none", "required"] | FunctionChoice = "auto"
    text: TextConfig | None = None
    max_output_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, ge=0.0, le=1.0)
    seed: int | None = Field(default=None, ge=0)
    stream: bool | None = False
    parallel_tool_calls: bool | None = None
    include: list[str] | None = Field(default=None, max_length=64)
    top_logprobs: int | None = Field(default=None, ge=0, le=MAX_TOP_LOGPROBS)
    previous_response_id: Any = None
    conversation: Any = None
    prompt: Any = None
    background: Any = None


LOGPROBS_INCLUDE = "message.output_text.logprobs"
"""The `include` value that asks for the output text's logprobs."""

STATEFUL = {
    "previous_response_id": "this proxy keeps no responses: send the whole input each time (store: false) "
    "instead of previous_response_id",
    "conversation": "this proxy keeps no conversations: send the whole input each time",
    "prompt": "stored prompt templates are not supported: send instructions and input",
    "background": "background responses are not supported",
}


def _text(content: str | list[Any]) -> str:
    if isinstance(content, str):
        return content
    return "".join(p.refusal if isinstance(p, Refusal) else p.text for p in content)


def _tools(request: ResponsesRequest) -> list[dict[str, Any]] | None:
    if not request.tools:
        return None
    seen: set[str] = set()
    out = []
    functions: list[tuple[str, FunctionTool]] = []
    for index, tool in enumerate(request.tools):
        if isinstance(tool, FunctionTool):
            functions.append((f"tools[{index}]", tool))
        elif isinstance(tool, NamespaceTool):
            functions += [(f"tools[{index}].tools[{i}]", t) for i, t in enumerate(tool.tools)]
    for where, tool in functions:
        if tool.name in seen:
            raise WireError(f"{where}: a second tool named {tool.name!r}", param=f"{where}.name")
        seen.add(tool.name)
        function: dict[str, Any] = {"name": tool.name}
        if tool.description is not None:
            function["description"] = tool.description
        function["parameters"] = tool.parameters or {"type": "object", "properties": {}}
        out.append({"type": "function", "function": function})
    return out or None


def _tool_choice(request: ResponsesRequest, names: set[str]) -> ToolChoice:
    choice = request.tool_choice
    if isinstance(choice, FunctionChoice):
        if choice.name not in names:
            raise WireError(
                f"tool_choice names {choice.name!r}, which is not among the tools", param="tool_choice"
            )
        return NamedTool(choice.name)
    if choice == "required" and not names:
        raise WireError("tool_choice 'required' needs at least one tool", param="tool_choice")
    return choice


def _output_format(request: ResponsesRequest) -> OutputFormat | None:
    form = request.text.format if request.text is not None else None
    if isinstance(form, FormatJsonSchema):
        return OutputFormat("json_schema", form.json_schema, form.name)
    if isinstance(form, FormatJsonObject):
        return OutputFormat("json_object")
    return None


class _Messages:
    """Input items into chat-template messages, one assistant message per assistant turn."""

    def __init__(self, instructions: str | None) -> None:
        self.system: list[str] = [instructions] if instructions else []
        self.out: list[dict[str, Any]] = []
        self.assistant: dict[str, Any] | None = None
        self.names: dict[str, str] = {}

    def flush(self) -> None:
        if self.system:
            self.out.append({"role": "system", "content": "\n\n".join(self.system)})
            self.system = []
        if self.assistant is not None:
            self.out.append(self.assistant)
            self.assistant = None

    def open_assistant(self) -> dict[str, Any]:
        if self.assistant is None:
            self.flush()
            self.assistant = {"role": "assistant", "content": ""}
        return self.assistant

    def add(self, item: Any) -> None:
        if isinstance(item, MessageItem) and item.role != "assistant":
            text = _text(item.content)
            if item.role == "user":
                self.flush()
                self.out.append({"role": "user", "content": text})
            elif not self.out and self.assistant is None:
                self.system.append(text)  # still leading: one system message
            else:
                self.flush()
                self.out.append({"role": "system", "content": text})
        elif isinstance(item, MessageItem):
            self.open_assistant()["content"] += _text(item.content)
        elif isinstance(item, FunctionCallItem):
            self.open_assistant().setdefault("tool_calls", []).append(
                {
                    "id": item.call_id,
                    "type": "function",
                    "function": {"name": item.name, "arguments": item.arguments},
                }
            )
            self.names[item.call_id] = item.name
        elif isinstance(item, FunctionCallOutputItem):
            self.flush()
            tool: dict[str, Any] = {
                "role": "tool",
                "content": _text(item.output),
                "tool_call_id": item.call_id,
            }
            if item.call_id in self.names:
                tool["name"] = self.names[item.call_id]
            self.out.append(tool)
        elif isinstance(item, ReasoningItem):
            text = "".join(p.text for p in (item.content or item.summary))
            message = self.open_assistant()
            message["reasoning_content"] = message.get("reasoning_content", "") + text


def to_conversation(request: ResponsesRequest) -> Conversation:
    for key, why in STATEFUL.items():
        if getattr(request, key) not in (None, False):
            raise WireError(why, param=key, code="unsupported_parameter")
    if LOGPROBS_INCLUDE in (request.include or []):
        raise WireError(
            "this proxy does not return logprobs on the Responses API; Chat Completions' "
            "'logprobs' and 'top_logprobs' return the sampled tokens' logprobs",
            param="include",
            code="unsupported_parameter",
        )
    builder = _Messages(request.instructions)
    for item in (
        [MessageItem(role="user", content=request.input)] if isinstance(request.input, str) else request.input
    ):
        builder.add(item)
    ends_on_assistant = builder.assistant is not None
    builder.flush()
    if ends_on_assistant:
        raise WireError("the input must not end with an assistant item (no prefill)", param="input")
    if not any(m["role"] != "system" for m in builder.out):
        raise WireError("the input holds no user message", param="input")
    tools = _tools(request)
    names = {t["function"]["name"] for t in tools or []}
    return Conversation(
        model=request.model,
        messages=builder.out,
        tools=tools,
        tool_choice=_tool_choice(request, names),
        output_format=_output_format(request),
        max_tokens=request.max_output_tokens,
        temperature=1.0 if request.temperature is None else request.temperature,
        top_p=1.0 if request.top_p is None else request.top_p,
        seed=request.seed,
        stream=bool(request.stream),
    )


def parse_request(body: Any) -> tuple[ResponsesRequest, Conversation]:
    """A decoded body into (the request, its conversation), or a WireError (400)."""
    request = validated(ResponsesRequest, body)
    return request, to_conversation(request)
