"""Split an answer's text, as it streams, into thinking and content, and stop showing content where
a tool call opens (pure logic).

`StreamSplitter.feed(text)` returns the `ContentDelta` / `ReasoningDelta` events that are safe to
send: text that could still be the start of a marker (`<think>`, `</think>`, `<tool_call>`) is held
back until the next piece decides it; content before a tool call loses its trailing whitespace
(the chat template writes its own newline there); once `<tool_call>` opens, nothing more streams:
the calls are only known when the answer is complete, and `split_answer` then says what the whole
turn is. Whatever the split streamed is a prefix of the final content and reasoning, so a wire adds
the rest (`remainder`) before its last event."""

from __future__ import annotations

from dataclasses import dataclass, field

from environments.proxy.conversation import ContentDelta, ReasoningDelta, TurnEvent
from environments.rollout.tool_calls import OPEN_TAG

THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"


def _held_suffix(text: str, markers: tuple[str, ...]) -> int:
    """Length of the longest suffix of `text` that is a proper prefix of one of `markers`."""
    best = 0
    for marker in markers:
        for n in range(min(len(marker) - 1, len(text)), best, -1):
            if text.endswith(marker[:n]):
                best = n
                break
    return best


@dataclass
class StreamSplitter:
    """`tool_calls`: the answer may hold tool-call markup (tools were given and not refused);
    `in_reasoning`: the prompt already opened the thinking block (templates that end their
    generation prompt with `<think>`)."""

    tool_calls: bool
    in_reasoning: bool = False
    thinking: bool = True
    """The model may open a `<think>` block (False: its text is never held back as a marker's start)."""
    state: str = field(init=False, default="start")
    """start (nothing shown yet) | reasoning | content | calls (a tool call opened: hold all)."""
    pending: str = field(init=False, default="")
    content: str = field(init=False, default="")
    """The content sent so far."""
    reasoning: str = field(init=False, default="")
    """The thinking sent so far."""
    _after_think: bool = field(init=False, default=False)

    def __post_init__(self) -> None:
        if self.in_reasoning:
            self.state = "reasoning"

    def feed(self, text: str) -> list[TurnEvent]:
        self.pending += text
        events: list[TurnEvent] = []
        while True:
            before = (self.state, len(self.pending))
            events.extend(self._step())
            if (self.state, len(self.pending)) == before:
                return events

    def _step(self) -> list[TurnEvent]:
        if self.state == "calls":
            return []
        if self.state == "start":
            if not self.thinking:
                self.state = "content"
                return []
            stripped = self.pending.lstrip()
            if stripped.startswith(THINK_OPEN):
                self.pending = stripped[len(THINK_OPEN) :]
                self.state = "reasoning"
                return []
            if not stripped or THINK_OPEN.startswith(stripped):
                return []  # still undecided
            self.state = "content"
            return []
        if self.state == "reasoning":
            at = self.pending.find(THINK_CLOSE)
            if at >= 0:
                text, self.pending = self.pending[:at], self.pending[at + len(THINK_CLOSE) :]
                self.state, self._after_think = "content", True
                return self._reasoning(text)
            keep = _held_suffix(self.pending, (THINK_CLOSE,))
            text, self.pending = (
                self.pending[: len(self.pending) - keep],
                self.pending[len(self.pending) - keep :],
            )
            return self._reasoning(text)
        # content
        if self._after_think:
            self.pending = self.pending.lstrip("\n")
            if not self.pending:
                return []
            self._after_think = False
        if self.tool_calls:
            at = self.pending.find(OPEN_TAG)
            if at >= 0:
                text, self.pending = self.pending[:at].rstrip(), self.pending[at:]
                self.state = "calls"
                return self._content(text)
            keep = _held_suffix(self.pending, (OPEN_TAG,))
            body = self.pending[: len(self.pending) - keep]
            shown = body.rstrip()
            self.pending = self.pending[len(shown) :]
            return self._content(shown)
        text, self.pending = self.pending, ""
        return self._content(text)

    def _content(self, text: str) -> list[TurnEvent]:
        if not text:
            return []
        self.content += text
        return [ContentDelta(text)]

    def _reasoning(self, text: str) -> list[TurnEvent]:
        if not text:
            return []
        self.reasoning += text
        return [ReasoningDelta(text)]


@dataclass(frozen=True)
class SplitText:
    """A whole answer's text split into its parts (the tool-call part still unparsed)."""

    reasoning: str | None
    before_calls: str
    """The content before the first tool-call tag (all of it when there is none)."""
    calls_text: str
    """From the first `<tool_call>` on ("" when there is none)."""


def split_text(
    text: str, *, tool_calls: bool, in_reasoning: bool = False, thinking: bool = True
) -> SplitText:
    """The same split `StreamSplitter` makes as it streams, over the whole text at once."""
    reasoning = None
    rest = text
    stripped = text.lstrip()
    if in_reasoning or (thinking and stripped.startswith(THINK_OPEN)):
        body = text if in_reasoning else stripped[len(THINK_OPEN) :]
        at = body.find(THINK_CLOSE)
        if at < 0:
            return SplitText(body, "", "")
        reasoning, rest = body[:at], body[at + len(THINK_CLOSE) :].lstrip("\n")
    if tool_calls:
        at = rest.find(OPEN_TAG)
        if at >= 0:
            return SplitText(reasoning, rest[:at], rest[at:])
    return SplitText(reasoning, rest, "")


def remainder(shown: str, whole: str) -> str:
    """What of `whole` is still to be sent after `shown` ("" when `shown` is not its prefix)."""
    return whole[len(shown) :] if whole.startswith(shown) else ""
