"""One trained turn of a live session, cut out of the session's record (pure logic).

A proxy sample is one assistant turn with its next state: the session's exact tokens up to the end
of that turn, every earlier turn masked (each was its own sample when its next state came), the
messages up to and including the next state. The OPD pipeline reads it like any rollout."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from hermes_opd.contract.constants import MASKED
from hermes_opd.record.trajectory import PROMPT_LOGPROB, Trajectory


@dataclass
class TurnSample:
    """A finished turn on its way through the pipeline, with its provenance."""

    trajectory: Trajectory
    session: str
    turn: int
    """The turn's index in its session (0 = the session's first answered turn)."""
    policy_model: str
    policy_version: int
    attempts: int = 0
    info: dict[str, Any] = field(default_factory=dict)


def cut_turn(record: Trajectory, turn_position: int) -> Trajectory:
    """`record`'s turn number `turn_position` (an index into `record.turns`) as its own trajectory:
    tokens up to the turn's end, only that turn unmasked, all messages of the record kept."""
    span = record.turns[turn_position]
    end = span.end
    masks = [MASKED] * end
    logprobs = [PROMPT_LOGPROB] * end
    for pos in range(span.start, end):
        masks[pos] = record.tokens[pos]
        logprobs[pos] = record.inference_logprobs[pos]
    return Trajectory(
        tokens=list(record.tokens[:end]),
        masks=masks,
        inference_logprobs=logprobs,
        messages=copy.deepcopy(record.messages),
        turns=[span],
        content_ends={i: e for i, e in record.content_ends.items() if e <= end},
        tools=record.tools,
        template_history=record.template_history,
        sequence_index=record.sequence_index,
        student_topk={p: row for p, row in record.student_topk.items() if span.start <= p < end},
        finish_reason=record.finish_reason,
    )
