"""Turn pairs: each assistant turn with the next state that followed it (pure logic)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from hermes_opd.record.trajectory import Trajectory, TurnSpan

TRUNCATION_MARKER = "\n[... truncated {omitted} characters ...]"

NextStateRole = Literal["tool", "user"]


@dataclass(frozen=True)
class TurnPair:
    """One assistant turn and what happened next."""

    turn_index: int
    span: TurnSpan
    assistant_message: dict[str, Any]
    context_messages: list[dict[str, Any]]
    """Everything before the turn (system, user, earlier turns and tool results)."""
    next_state_role: NextStateRole | None
    """`tool` when tool results follow, `user` when a user (or verifier) message follows, None at the end."""
    next_state_text: str
    """The tool results (each truncated, joined) or the user message; empty when there is none."""
    next_state_messages: tuple[dict[str, Any], ...] = ()
    """The messages of the next state as they are in the conversation (tool results, then the user
    message that may follow them), for judges that read each message with its own role (the process
    reward judge, judge/prm_prompt.py). Empty when there is no next state, or when the pair was built
    from text alone: then `next_state_text` under `next_state_role` is the whole next state."""

    @property
    def has_next_state(self) -> bool:
        return self.next_state_role is not None


def message_text(message: dict[str, Any]) -> str:
    """A chat message's text: its string content, or the joined text parts of a list content."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return ""


def truncate_text(text: str, max_chars: int) -> str:
    """Keep the first `max_chars` characters and say how many were cut."""
    if max_chars <= 0 or len(text) <= max_chars:
        return text
    omitted = len(text) - max_chars
    return text[:max_chars] + TRUNCATION_MARKER.format(omitted=omitted)


def extract_turn_pairs(trajectory: Trajectory, max_next_state_chars: int = 4000) -> list[TurnPair]:
    """Every assistant turn (tool-call turns included) paired with its next state.

    The next state is all consecutive `tool` messages right after the turn (and the `user` message
    right after them, when the rollout stopped there and the verifier's feedback follows), or the
    next `user` message (the verifier's feedback included). A turn followed by nothing gets role None.
    """
    pairs: list[TurnPair] = []
    messages = trajectory.messages
    for turn_index, span in enumerate(trajectory.turns):
        follow = span.message_index + 1
        role: NextStateRole | None = None
        text = ""
        state: list[dict[str, Any]] = []
        if follow < len(messages):
            first_role = messages[follow].get("role")
            if first_role == "tool":
                role = "tool"
                parts = []
                j = follow
                while j < len(messages) and messages[j].get("role") == "tool":
                    state.append(messages[j])
                    name = messages[j].get("name") or "tool"
                    parts.append(
                        f"[{name}]\n" + truncate_text(message_text(messages[j]), max_next_state_chars)
                    )
                    j += 1
                if j < len(messages) and messages[j].get("role") == "user":
                    # A rollout that stopped on a tool call: the verifier's word follows the results
                    # directly and is part of this turn's next state.
                    state.append(messages[j])
                    name = messages[j].get("name") or "user"
                    parts.append(
                        f"[{name}]\n" + truncate_text(message_text(messages[j]), max_next_state_chars)
                    )
                text = "\n\n".join(parts)
            elif first_role == "user":
                role = "user"
                state.append(messages[follow])
                text = truncate_text(message_text(messages[follow]), max_next_state_chars)
        pairs.append(
            TurnPair(
                turn_index=turn_index,
                span=span,
                assistant_message=messages[span.message_index],
                context_messages=messages[: span.message_index],
                next_state_role=role,
                next_state_text=text,
                next_state_messages=tuple(state),
            )
        )
    return pairs
