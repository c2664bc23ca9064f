"""The one conversation shape every wire translates into, and the one answer shape it translates
back from (pure data, no I/O).

A wire (Chat Completions, Responses, Anthropic Messages; one folder each under
environments/proxy/) parses its request into a `Conversation`: messages in the chat-template form
the session's recorder takes (system, user, assistant with tool calls and reasoning, tool results),
the tools as JSON-schema functions, and what constrains the output. The session machinery answers
with a stream of `ContentDelta` / `ReasoningDelta` events, as vLLM samples the tokens, and one
`TurnDone` holding the whole `AssistantTurn`; the wire renders those as its own objects and stream
events. A refusal is a `WireError`, which each wire renders in its own error shape."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from hermes_opd.contract.errors import HermesOPDError

ErrorKind = Literal[
    "invalid_request",  # 400: the request is malformed or asks for what cannot be honoured
    "authentication",  # 401: a missing or wrong key
    "permission",  # 403: a key that may not do this
    "not_found",  # 404: an unknown route, model or session
    "method_not_allowed",  # 405
    "too_large",  # 413: the body or the rendered prompt is over a bound
    "timeout",  # 408: the client was too slow to send its request
    "overloaded",  # 429/503: the proxy's bounds are full right now; retry later
    "upstream",  # 502: the policy server failed
]
"""What went wrong, independent of the wire; each wire maps it to its own status and error type."""

MAX_TOP_LOGPROBS = 20
"""The most alternatives per token a client may ask for (OpenAI's bound)."""

STATUS: dict[str, int] = {
    "invalid_request": 400,
    "authentication": 401,
    "permission": 403,
    "not_found": 404,
    "method_not_allowed": 405,
    "timeout": 408,
    "too_large": 413,
    "overloaded": 503,
    "upstream": 502,
}


class WireError(HermesOPDError):
    """A request the proxy refuses or could not answer: one clear message, never a traceback."""

    def __init__(
        self,
        message: str,
        kind: ErrorKind = "invalid_request",
        *,
        param: str | None = None,
        code: str | None = None,
        status: int | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.kind = kind
        self.param = param
        self.code = code
        self.status = status if status is not None else STATUS[kind]


@dataclass(frozen=True)
class NamedTool:
    """`tool_choice` naming one function: the answer must be a call to it."""

    name: str


ToolChoice = Literal["auto", "none", "required"] | NamedTool


@dataclass(frozen=True)
class OutputFormat:
    """Structured output asked for: `json_schema` (with its schema) or `json_object` (any object)."""

    kind: Literal["json_schema", "json_object"]
    schema: dict[str, Any] | None = None
    name: str | None = None


@dataclass(frozen=True)
class Conversation:
    """One request, whatever wire it came on.

    `messages` are in the chat-template form: `{"role": "system" | "user" | "assistant" | "tool",
    "content": str}`; an assistant message may carry `tool_calls` (`[{"id", "type": "function",
    "function": {"name", "arguments": <JSON text>}}]`) and `reasoning_content` (its thinking, as
    the model wrote it); a tool message carries `tool_call_id` (and `name` where known). `tools` are
    `[{"type": "function", "function": {"name", "description", "parameters"}}]`."""

    model: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None = None
    tool_choice: ToolChoice = "auto"
    output_format: OutputFormat | None = None
    max_tokens: int | None = None
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int | None = None
    stop: list[str] = field(default_factory=list)
    stream: bool = False
    logprobs: int | None = None
    """The sampled tokens' logprobs the client asked for, with this many most likely alternatives at
    each position (0 to MAX_TOP_LOGPROBS); None: not asked."""

    @property
    def tool_names(self) -> set[str]:
        return {t["function"]["name"] for t in self.tools or []}


@dataclass(frozen=True)
class ToolCall:
    """One call the model made: `arguments` is JSON text of an object that the tool's schema
    accepts (a call that does not parse or does not fit its schema stays content, as written)."""

    id: str
    name: str
    arguments: str


FinishReason = Literal["stop", "length", "tool_calls"]


@dataclass(frozen=True)
class AssistantTurn:
    """The whole answer: what the policy sampled, parsed into content, reasoning and tool calls."""

    content: str
    reasoning: str | None
    tool_calls: list[ToolCall]
    finish_reason: FinishReason
    prompt_tokens: int
    completion_tokens: int
    stop_sequence: str | None = None
    """The client's stop sequence that ended the answer, if one did."""


@dataclass(frozen=True)
class AnswerStarted:
    """The first event of an answer, once vLLM has accepted the request (before its first token):
    the prompt's token count (a refusal before this is an HTTP error; after it, an in-stream
    error)."""

    prompt_tokens: int


@dataclass(frozen=True)
class ContentDelta:
    """Answer text, streamed as vLLM samples it (before any tool call opens)."""

    text: str


@dataclass(frozen=True)
class ReasoningDelta:
    """Thinking text (between the model's think markers), streamed as vLLM samples it."""

    text: str


@dataclass(frozen=True)
class TokenLogprobs:
    """The logprobs of the tokens sampled since the last such event, in OpenAI's logprob form
    (environments/proxy/token_logprobs.py); only when the client asked for them. It comes before
    the text those tokens make, so a wire attaches it to the next event it writes."""

    entries: list[dict[str, Any]]


@dataclass(frozen=True)
class TurnDone:
    """The last event of an answer: the whole turn (tool calls are only known here)."""

    turn: AssistantTurn


TurnEvent = AnswerStarted | ContentDelta | ReasoningDelta | TokenLogprobs | TurnDone


@dataclass(frozen=True)
class Caller:
    """Who asks, as the server resolved it from the request's key and headers."""

    owner: str
    """Whose sessions this request may touch (one name per API key)."""
    may_train: bool
    """A training key, training on, and the request did not opt out (X-Hermes-Train: false)."""
    session_id: str | None
    """The session the client named in a header, if any (see sessions.session_id_from_headers)."""
    ends_session: bool = False
    body_bytes: int = 0
    """The size of the request's body (its tools and schemas included)."""
