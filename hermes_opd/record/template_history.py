"""How a chat template treats conversation history, probed once per rollout (pure logic over a
render function).

The transcript recorder extends one exact token stream by the text a template appends after the
last assistant turn. That only works while the template is *append-only*: rendering the
conversation with new messages must start with the rendering without them. Templates differ:

- ChatML/Hermes-style templates (the dev template) are append-only for tool and user messages and
  keep an assistant's `<think>` text as written.
- Qwen3-style templates drop the reasoning of assistant turns *before the last user query*. In a
  tool loop the last user query does not move, so they stay append-only for `tool` messages; a new
  `user` message after a reasoning turn re-renders that turn without its reasoning.

`probe_template_history` renders a small fixed conversation to find out which case applies; the
recorder stores the answer in the trajectory (`Trajectory.template_history`) and uses it to say
what it does when a user message follows (docs/distill-format.md, "Reasoning in past turns").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

PROBE_REASONING = "probe reasoning 7f3a"
PROBE_ANSWER = "probe answer 7f3a"

PAST_REASONING_KEPT = "kept"
"""Past `<think>` text is rendered as written after tool and user messages alike."""
PAST_REASONING_DROPPED_BEFORE_LAST_USER = "dropped_before_last_user"
"""Kept while tool messages follow; dropped once a later user message exists (Qwen3 style)."""
PAST_REASONING_DROPPED = "dropped"
"""Dropped as soon as any message follows (the template cannot be used for exact tool loops)."""

Render = Callable[[list[dict[str, Any]], bool], str]
"""(messages, add_generation_prompt) -> rendered text."""


@dataclass(frozen=True)
class TemplateHistory:
    """What the chat template does to earlier turns when messages are appended."""

    tool_append_only: bool
    """Appending a tool result after an assistant turn keeps the earlier rendering as a prefix."""
    user_append_only: bool
    """Appending a user message after a reasoning turn keeps the earlier rendering as a prefix."""
    past_reasoning: str
    """`kept`, `dropped_before_last_user` or `dropped` (see the constants above)."""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def probe_template_history(render: Render) -> TemplateHistory:
    """Render a fixed two-turn conversation with a reasoning turn and classify the template."""
    assistant = {"role": "assistant", "content": f"<think>\n{PROBE_REASONING}\n</think>\n\n{PROBE_ANSWER}"}
    base = [{"role": "user", "content": "probe question"}, assistant]
    tool = {"role": "tool", "name": "probe", "content": "probe result"}
    user = {"role": "user", "content": "probe follow-up"}
    before = render(base, False)
    after_tool = render([*base, tool], True)
    after_user = render([*base, user], True)
    kept_after_tool = PROBE_REASONING in after_tool
    kept_after_user = PROBE_REASONING in after_user
    if kept_after_tool and kept_after_user:
        past = PAST_REASONING_KEPT
    elif kept_after_tool:
        past = PAST_REASONING_DROPPED_BEFORE_LAST_USER
    else:
        past = PAST_REASONING_DROPPED
    return TemplateHistory(
        tool_append_only=after_tool.startswith(before),
        user_append_only=after_user.startswith(before),
        past_reasoning=past,
    )
