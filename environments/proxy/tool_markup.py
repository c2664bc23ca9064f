"""The tool-call markup a chat template writes, learnt from the template itself, and the grammar
that forces an answer to be such calls (`tool_choice: "required"` or a named function).

The template renders an assistant turn with sentinel calls; what it writes before, between and
after the calls' arguments is the markup the policy must sample, so that the client's re-sent
call renders back to the very tokens that were sampled. A template that does not render calls
this way cannot be constrained: `GrammarError` (a 400)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from environments.proxy.output_grammar import GrammarBuilder, GrammarError, literal
from environments.proxy.streaming_split import THINK_OPEN

_SENTINEL_ARGS = {"__hermes_opd_arguments__": 7}
_SENTINEL_TEXT = "__hermes_opd_content__"


@dataclass(frozen=True)
class CallMarkup:
    """One call is `before(name) + arguments JSON + after`; calls are joined by `between`."""

    head: str
    """`before` with the name cut out: `head + name + tail`."""
    tail: str
    after: str
    between: str

    def before(self, name: str) -> str:
        return self.head + name + self.tail


def _render(tokenizer: Any, messages: list[dict[str, Any]], tools: list[dict[str, Any]], prompt: bool) -> str:
    return tokenizer.apply_chat_template(messages, tools=tools, tokenize=False, add_generation_prompt=prompt)


def call_markup(tokenizer: Any, tools: list[dict[str, Any]]) -> CallMarkup:
    """What the template writes around tool calls (raises GrammarError if it cannot be learnt)."""
    name = tools[0]["function"]["name"]
    user = [{"role": "user", "content": "x"}]

    def call(i: int) -> dict[str, Any]:
        return {"id": f"c{i}", "type": "function", "function": {"name": name, "arguments": _SENTINEL_ARGS}}

    try:
        prompt = _render(tokenizer, user, tools, True)
        text_turn = _render(
            tokenizer, [*user, {"role": "assistant", "content": _SENTINEL_TEXT}], tools, False
        )
        one = _render(
            tokenizer, [*user, {"role": "assistant", "content": "", "tool_calls": [call(0)]}], tools, False
        )
        two = _render(
            tokenizer,
            [*user, {"role": "assistant", "content": "", "tool_calls": [call(0), call(1)]}],
            tools,
            False,
        )
    except Exception as exc:  # noqa: BLE001 - a template's own error: the constraint cannot be built
        raise GrammarError(f"the model's chat template cannot render a tool call ({exc})") from exc
    if prompt.rstrip().endswith(THINK_OPEN):  # the generation prompt opens a thinking block: a
        # rendered turn (no thinking here) starts where that block would
        prompt = prompt[: prompt.rstrip().rfind(THINK_OPEN)]
    args = json.dumps(_SENTINEL_ARGS, ensure_ascii=False)
    end_at = text_turn.find(_SENTINEL_TEXT)
    if not text_turn.startswith(prompt) or end_at < 0:
        raise GrammarError("the model's chat template does not render an assistant turn after its prompt")
    end_of_turn = text_turn[end_at + len(_SENTINEL_TEXT) :]
    if not (one.startswith(prompt) and one.endswith(end_of_turn) and two.startswith(prompt)):
        raise GrammarError(
            "the model's chat template renders tool calls in a form the proxy cannot constrain"
        )
    written = one[len(prompt) : len(one) - len(end_of_turn)]
    at = written.find(args)
    if at < 0 or written.count(args) != 1 or written[:at].count(name) != 1:
        raise GrammarError("the model's chat template does not write a call's arguments as JSON")
    before, after = written[:at], written[at + len(args) :]
    both = two[len(prompt) : len(two) - len(end_of_turn)]
    if not (both.startswith(written) and both.endswith(before + args + after)):
        raise GrammarError(
            "the model's chat template renders several tool calls in a form the proxy cannot constrain"
        )
    between = both[len(written) : len(both) - len(before + args + after)]
    cut = before.find(name)
    return CallMarkup(before[:cut], before[cut + len(name) :], after, between)


def tool_call_grammar(tools: list[dict[str, Any]], markup: CallMarkup, only: str | None) -> str:
    """The answer is one or more calls (`only` None: any of `tools`) or exactly one call of `only`,
    each with arguments its tool's `parameters` schema accepts, in the template's own markup."""
    builder = GrammarBuilder()
    calls = []
    for index, tool in enumerate(tools):
        function = tool["function"]
        if only is not None and function["name"] != only:
            continue
        where = f"tools[{index}].function.parameters"
        arguments = builder.top(function.get("parameters") or {"type": "object"}, where)
        calls.append(
            builder.rule(f"{literal(markup.before(function['name']))} {arguments} {literal(markup.after)}")
        )
    if not calls:
        raise GrammarError(f"tool_choice names {only!r}, which is not among the tools")
    call = builder.rule(" | ".join(calls))
    if only is not None:
        return builder.text(call)
    return builder.text(f"{call} ({literal(markup.between)} {call})*")
