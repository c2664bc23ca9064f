"""The order of an answer's parts, for the wires whose answers are a list of parts (Responses'
output items, Anthropic's content blocks): pure logic, no I/O.

The core hands a wire `ReasoningDelta`s, `ContentDelta`s and one `TurnDone`
(environments/proxy/conversation.py). `PartStream` decides, the same way for every such wire, when
a part opens, which part a delta belongs to and when a part closes:
- the first thinking delta opens a `reasoning` part; the first text delta closes it (thinking comes
  first) and opens a `text` part;
- at the end, the parts still open are closed with the turn's final text (whatever the final text
  adds to what was streamed is sent as one more delta), a turn that streamed nothing but has text
  (or has neither text nor calls) gets its parts then, and one `call` part follows per tool call.

A wire subclasses it and writes only its own events and objects, in five hooks: `_opened`,
`_delta_events`, `_closed`, `_call` and `_ended`."""

from __future__ import annotations

from typing import Any

from environments.proxy.conversation import (
    AnswerStarted,
    AssistantTurn,
    ContentDelta,
    ReasoningDelta,
    ToolCall,
    TurnDone,
    TurnEvent,
)

Event = dict[str, Any]


class Part:
    """One part being written: its index, kind (`reasoning`, `text` or `call`), the wire's id for
    it, the text sent so far, and its finished object (`done`, set by the wire once it closes)."""

    def __init__(self, index: int, kind: str, part_id: str) -> None:
        self.index = index
        self.kind = kind
        self.id = part_id
        self.text = ""
        self.done: dict[str, Any] | None = None


class PartStream:
    """One answer's parts and the wire's events for them, in order (`on`); `final` is the wire's
    whole answer object once the turn is done."""

    def __init__(self) -> None:
        self.parts: list[Part] = []
        self.open: Part | None = None
        self.final: dict[str, Any] | None = None

    # -- the wire's hooks ----------------------------------------------------------------------
    def _part_id(self, kind: str) -> str:
        """The wire's id for a new part (none by default)."""
        return ""

    def _opened(self, part: Part) -> list[Event]:
        """The events that announce a new reasoning or text part."""
        raise NotImplementedError

    def _delta_events(self, part: Part, text: str) -> list[Event]:
        """The events for `text` added to an open part (already appended to `part.text`)."""
        raise NotImplementedError

    def _closed(self, part: Part, final: str) -> list[Event]:
        """Set `part.done` to the finished part with text `final`; the events that close it."""
        raise NotImplementedError

    def _call(self, part: Part, call: ToolCall) -> list[Event]:
        """Set `part.done` to the finished call part; the events that send it whole."""
        raise NotImplementedError

    def _ended(self, turn: AssistantTurn) -> list[Event]:
        """Set `final` to the wire's whole answer; the events that end the answer."""
        raise NotImplementedError

    # -- the order, the same on every wire -----------------------------------------------------
    def on(self, event: TurnEvent) -> list[Event]:
        """The wire's events for one of the core's events (`AnswerStarted` went to `start`)."""
        if isinstance(event, AnswerStarted):
            return []
        if isinstance(event, ReasoningDelta):
            part = self._find("reasoning")
            if part is None:
                return self._open("reasoning") + self._delta(self.parts[-1], event.text)
            return self._delta(part, event.text) if part is self.open else []
        if isinstance(event, ContentDelta):
            events: list[Event] = []
            if self.open is not None and self.open.kind == "reasoning":
                events += self._close(self.open, self.open.text)
            part = self._find("text")
            if part is None:
                events += self._open("text")
                part = self.parts[-1]
            return events + (self._delta(part, event.text) if part is self.open else [])
        if isinstance(event, TurnDone):
            return self._finish(event.turn)
        raise TypeError(f"not a turn event: {event!r}")

    def _finish(self, turn: AssistantTurn) -> list[Event]:
        events: list[Event] = []
        reasoning = self._find("reasoning")
        if reasoning is not None and reasoning.done is None:
            events += self._close(reasoning, turn.reasoning or reasoning.text)
        elif reasoning is None and turn.reasoning:
            events += self._open("reasoning")
            events += self._close(self.parts[-1], turn.reasoning)
        text = self._find("text")
        if text is None and (turn.content or not turn.tool_calls):
            events += self._open("text")
            text = self.parts[-1]
        if text is not None and text.done is None:
            events += self._close(text, turn.content)
        for call in turn.tool_calls:
            part = self._new("call")
            events += self._call(part, call)
        return events + self._ended(turn)

    def _new(self, kind: str) -> Part:
        part = Part(len(self.parts), kind, self._part_id(kind))
        self.parts.append(part)
        return part

    def _open(self, kind: str) -> list[Event]:
        self.open = self._new(kind)
        return self._opened(self.open)

    def _delta(self, part: Part, text: str) -> list[Event]:
        if not text:
            return []
        part.text += text
        return self._delta_events(part, text)

    def _close(self, part: Part, final: str) -> list[Event]:
        """Send what `final` adds to the streamed text, then the part's closing events."""
        events = self._delta(part, final[len(part.text) :]) if final.startswith(part.text) else []
        self.open = None
        return events + self._closed(part, final)

    def _find(self, kind: str) -> Part | None:
        return next((part for part in self.parts if part.kind == kind), None)
