"""The exact record of one rollout (docs/distill-format.md).

A `Trajectory` is written once, at generation time, by the agent loop. Everything downstream
(turn pairs, teacher scoring, distill packing, trainers) reads positions from it and never
re-tokenizes text.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hermes_opd.contract.constants import MASKED

PROMPT_LOGPROB = 1.0
"""Atropos' placeholder in `inference_logprobs` at positions the policy did not generate."""


@dataclass(frozen=True)
class TurnSpan:
    """Half-open span `[start, end)` of one assistant turn's generated tokens."""

    start: int
    end: int
    message_index: int
    """Index of the assistant message in `Trajectory.messages` that these tokens produced."""

    def __len__(self) -> int:
        return self.end - self.start


@dataclass
class Trajectory:
    """Exact tokens, masks, logprobs and per-turn spans of one rollout."""

    tokens: list[int] = field(default_factory=list)
    masks: list[int] = field(default_factory=list)
    inference_logprobs: list[float] = field(default_factory=list)
    messages: list[dict[str, Any]] = field(default_factory=list)
    turns: list[TurnSpan] = field(default_factory=list)
    content_ends: dict[int, int] = field(default_factory=dict)
    """message index -> token index just after that message's content, for the messages a hint can
    anchor on (`hint_anchor`: each batch's last user message and its last message). This is where a
    hint is spliced into the student's exact prefix."""
    tools: list[dict[str, Any]] | None = None
    template_history: dict[str, Any] | None = None
    """How the chat template treats earlier turns (`hermes_opd.record.template_history.TemplateHistory`):
    whether tool and user messages are append-only and whether past reasoning is kept."""
    sequence_index: int = 0
    """0, or the index of this sequence when a history rewrite split the rollout (see the recorder)."""
    student_topk: dict[int, tuple[list[int], list[float]]] = field(default_factory=dict)
    """generated position -> the sampler's top-K (ids, logprobs) there, when the policy was asked for
    them (`hermes_opd.record.student_topk_rows`); empty otherwise."""
    finish_reason: str = ""
    score: float = 0.0
    info: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.check()

    def check(self) -> None:
        """Raise ValueError if the record breaks its invariants (docs/distill-format.md, the trajectory)."""
        n = len(self.tokens)
        if len(self.masks) != n or len(self.inference_logprobs) != n:
            raise ValueError(
                f"trajectory lengths differ: tokens={n} masks={len(self.masks)} "
                f"inference_logprobs={len(self.inference_logprobs)}"
            )
        covered = set()
        prev_end = 0
        for turn in self.turns:
            if not (prev_end <= turn.start <= turn.end <= n):
                raise ValueError(f"turn span {turn} is out of order or out of range (n={n})")
            prev_end = turn.end
            covered.update(range(turn.start, turn.end))
        for pos, (tok, mask) in enumerate(zip(self.tokens, self.masks, strict=True)):
            if pos in covered:
                if mask != tok:
                    raise ValueError(f"position {pos} is generated but its mask is {mask}, not {tok}")
            elif mask != MASKED:
                raise ValueError(f"position {pos} is outside every turn span but unmasked")
        stray = sorted(p for p in self.student_topk if p not in covered)
        if stray:
            raise ValueError(f"sampled top-K rows at positions {stray[:5]} that no turn generated")

    def context_messages(self, turn: TurnSpan) -> list[dict[str, Any]]:
        """Messages the policy saw before generating `turn`."""
        return self.messages[: turn.message_index]

    def hint_anchor(self, turn: TurnSpan) -> int | None:
        """Token index where a hint for `turn` goes: after the content of the last user message
        before the turn, or of the last message if there is no user message."""
        context = self.context_messages(turn)
        user_indices = [i for i, m in enumerate(context) if m.get("role") == "user"]
        index = user_indices[-1] if user_indices else len(context) - 1
        if index < 0:
            return None
        return self.content_ends.get(index)
