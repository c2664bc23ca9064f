"""A whole answer's text -> its thinking, its content and its tool calls (pure logic).

The split is the one `StreamSplitter` makes as the answer streams (streaming_split.py), so the
content it streamed is a prefix of the content decided here. A call counts only when its block
parses and its arguments fit its tool's schema (tool_fit.py); any other block stays in the
content, as the model wrote it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from environments.proxy.streaming_split import split_text
from environments.proxy.tool_fit import fits
from environments.rollout.tool_calls import ToolCall, parse_tool_calls


@dataclass(frozen=True)
class AnswerParts:
    reasoning: str | None
    content: str
    calls: list[ToolCall]


def answer_parts(
    text: str,
    tools: list[dict[str, Any]] | None,
    *,
    tool_calls: bool,
    in_reasoning: bool = False,
    thinking: bool = True,
) -> AnswerParts:
    """`tool_calls`: the answer may hold calls (tools given, tool_choice not "none"); `thinking`:
    the model may open a `<think>` block."""
    split = split_text(text, tool_calls=tool_calls, in_reasoning=in_reasoning, thinking=thinking)
    content = split.before_calls + split.calls_text
    if not split.calls_text:
        return AnswerParts(split.reasoning, content, [])
    parameters = {t["function"]["name"]: t["function"].get("parameters") for t in tools or []}
    parsed = parse_tool_calls(split.calls_text, set(parameters))
    calls = [c for c in parsed.valid_calls if fits(c.arguments, parameters[c.name])]
    if not calls:
        return AnswerParts(split.reasoning, content, [])
    left = split.calls_text
    for call in calls:
        left = left.replace(call.raw, "", 1)
    rest = "\n".join(part.strip() for part in left.split("\n") if part.strip())
    before = split.before_calls.rstrip()
    return AnswerParts(split.reasoning, "\n".join(part for part in (before, rest) if part), calls)
