"""The judge prompt, built from one `TurnPair` (pure logic).

The judge sees three things: the conversation before the turn (compact, cut from the front to a
character budget, the task's first user message kept), the assistant turn (its text and its tool
calls), and the next state with its role. It answers with one `\\boxed{1}` or `\\boxed{-1}`, and on 1
with a short hint between the hint markers.

Text from the trajectory is untrusted (a tool may print anything). Before it goes into the prompt,
the answer markers in it are defused (judge/parsing.py, `defuse_markers`: every marker the parser reads,
in any case it reads, gets a space after its first character: `\\boxed` -> `\\ boxed`), so a file that
contains them cannot plant an answer the parser would pick up if the judge echoes it. Each part is
defused whole, after its pieces are joined, so a marker split across two next-state messages or two
content parts is caught too.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from hermes_opd.record.turn_pairs import TurnPair, message_text
from judge.config import JudgeConfig
from judge.parsing import HINT_END, HINT_START, defuse_markers

OMITTED_FRONT = "[... {omitted} earlier characters omitted ...]"
OMITTED_MIDDLE = "\n[... {omitted} characters omitted ...]\n"
TASK_SHARE_OF_CONTEXT = 3
"""The pinned first user message may use at most 1/3 of the context budget."""

SYSTEM_PROMPT = f"""You audit a single step taken by an AI assistant that works with tools, after the fact.

You are shown the conversation up to that step, the step itself (the assistant's message and any \
tool calls it made), and the state that came right after it: either tool results or the user's \
next message.

Your question: does that next state contain information which, had the assistant known it when it \
acted, would have led to a clearly better step? Examples: an error or traceback that exposes a \
mistake in the step, a failing test, a wrong assumption about a file, an API or an environment, a \
user correcting or rejecting what the assistant did.

Be strict about tool results. They did not exist before the step; the step caused them. A clean, \
successful tool result only confirms the action. It is not information the assistant should have \
known, so it is never a reason to answer 1. Answer 1 for a tool result only if it reveals a \
problem that the step could have avoided.

Answer format:
- Reason briefly if you need to, then give your verdict exactly once: \\boxed{{1}} if the next state \
shows how the step should have been better, \\boxed{{-1}} otherwise.
- With \\boxed{{1}}, also write a hint of one to three sentences between {HINT_START} and {HINT_END}. \
Address the assistant directly and say concretely what to do differently (which command, file, \
value, argument or check). Write it as advice it could have followed before acting; do not say \
that you have seen what happened next.
- With \\boxed{{-1}}, write no hint."""

ROLE_NOTES = {
    "tool": "The next state is TOOL OUTPUT produced by the step's own tool calls. A clean success is "
    "not hindsight information; answer 1 only if it reveals a mistake the step could have avoided.",
    "user": "The next state is the USER's reply (it may be automated verifier feedback). Corrections, "
    "complaints, failing checks or requirements the step should have met count as hindsight "
    "information; an approval or thanks in any words, a plain acknowledgement or an unrelated new "
    "request does not, and neither does a reply you cannot read as a correction.",
}


@dataclass(frozen=True)
class JudgePrompt:
    """System and user message of one judge request."""

    system: str
    user: str

    def as_messages(self) -> list[dict[str, str]]:
        return [{"role": "system", "content": self.system}, {"role": "user", "content": self.user}]


def elide_middle(text: str, max_chars: int) -> str:
    """Keep the start and the end of `text` within about `max_chars` characters."""
    if len(text) <= max_chars:
        return text
    head = max_chars // 2
    tail = max_chars - head
    omitted = len(text) - head - tail
    return text[:head] + OMITTED_MIDDLE.format(omitted=omitted) + text[len(text) - tail :]


def render_tool_call(call: dict[str, Any]) -> str:
    function = call.get("function") or {}
    name = function.get("name") or call.get("name") or "?"
    arguments = function.get("arguments", call.get("arguments", ""))
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments, ensure_ascii=False)
    return f"-> call {name}({arguments})"


def render_message(message: dict[str, Any]) -> str:
    """One message as `[role]` or `[tool:name]`, its text, then one line per tool call."""
    role = message.get("role", "?")
    label = f"tool:{message['name']}" if role == "tool" and message.get("name") else role
    lines = [f"[{label}]"]
    text = message_text(message).strip()
    if text:
        lines.append(text)
    lines.extend(render_tool_call(call) for call in message.get("tool_calls") or [])
    return "\n".join(lines)


def render_context(messages: list[dict[str, Any]], char_budget: int) -> str:
    """The conversation before the turn, within about `char_budget` characters.

    When everything fits it is shown whole. Otherwise the first user message (the task) is kept,
    middle-elided to a third of the budget if needed; messages before it (the system prompt) are
    dropped, and what follows it is cut from the front, character-wise, so the most recent part of
    the conversation is what remains. A marker says how many characters were cut.
    """
    blocks = [render_message(m) for m in messages]
    if not blocks:
        return "(no earlier messages)"
    joined = "\n\n".join(blocks)
    if len(joined) <= char_budget:
        return joined

    task_index = next((i for i, m in enumerate(messages) if m.get("role") == "user"), None)
    parts: list[str] = []
    after_task = blocks
    omitted = 0
    if task_index is not None:
        parts.append(elide_middle(blocks[task_index], char_budget // TASK_SHARE_OF_CONTEXT))
        omitted += sum(len(b) + 2 for b in blocks[:task_index])
        after_task = blocks[task_index + 1 :]
    recent = "\n\n".join(after_task)
    room = max(0, char_budget - sum(len(p) for p in parts))
    if len(recent) > room:
        omitted += len(recent) - room
        recent = recent[len(recent) - room :] if room else ""
    if omitted:
        parts.append(OMITTED_FRONT.format(omitted=omitted))
    if recent:
        parts.append(recent)
    return "\n\n".join(parts)


def render_turn(message: dict[str, Any], char_budget: int) -> str:
    text = message_text(message).strip()
    calls = [render_tool_call(call) for call in message.get("tool_calls") or []]
    body = elide_middle(text, char_budget) if text else "(no text)"
    if calls:
        body += "\n" + elide_middle("\n".join(calls), char_budget)
    return body


def build_judge_prompt(
    pair: TurnPair,
    context_char_budget: int = 6000,
    turn_char_budget: int = 4000,
    next_state_char_budget: int = 4000,
) -> JudgePrompt:
    """The judge's system and user messages for one turn pair that has a next state."""
    if pair.next_state_role is None:
        raise ValueError(f"turn {pair.turn_index} has no next state to judge it by")
    context = defuse_markers(render_context(pair.context_messages, context_char_budget))
    turn = defuse_markers(render_turn(pair.assistant_message, turn_char_budget))
    next_state = defuse_markers(
        elide_middle(pair.next_state_text.strip() or "(empty)", next_state_char_budget)
    )
    role = pair.next_state_role
    user = (
        f"<conversation_before_the_step>\n{context}\n</conversation_before_the_step>\n\n"
        f"<the_step>\n{turn}\n</the_step>\n\n"
        f'<next_state role="{role}">\n{next_state}\n</next_state>\n\n'
        f"{ROLE_NOTES[role]}\n"
        "Does the next state show how the step should have been better? End with \\boxed{1} or "
        f"\\boxed{{-1}}; with \\boxed{{1}} add the hint between {HINT_START} and {HINT_END}."
    )
    return JudgePrompt(system=SYSTEM_PROMPT, user=user)


def build_judge_prompt_from_config(pair: TurnPair, config: JudgeConfig) -> JudgePrompt:
    """Same, with the budgets taken from a `JudgeConfig`."""
    return build_judge_prompt(
        pair,
        context_char_budget=config.context_char_budget,
        turn_char_budget=config.turn_char_budget,
        next_state_char_budget=config.next_state_char_budget,
    )
