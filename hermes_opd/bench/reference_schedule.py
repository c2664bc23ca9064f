"""The reference's OPD schedule, written here for comparison only (measured in docs/benchmarks.md).

What the reference does, schedule-wise: OPD starts only after the WHOLE group has finished; then
it walks the group sequence by sequence and each sequence turn by turn; only the m judge votes of
one turn run concurrently; the teacher request of a turn is sent after its votes and awaited before
the next turn starts. Its output is dense: a [T][K] array per sequence, zero-padded (token 0,
logprob 0.0) wherever there is no teacher row.

To isolate the schedule, every per-turn step here is OUR code (turn pairs, judge votes and vote
policy, hint splicing, the same teacher client, alignment), so the only difference from
`OPDPipeline` is the order in which things wait for each other (and the dense output).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from hermes_opd.record.hint_splice import build_canonical_teacher_input, tokenizer_codec
from hermes_opd.record.trajectory import Trajectory
from hermes_opd.record.turn_pairs import extract_turn_pairs
from judge.backends import JudgeBackend
from judge.config import JudgeConfig
from judge.judge_turn import judge_turn
from scoring.teacher import TeacherScorer


@dataclass
class ReferenceTurn:
    sequence: int
    turn_index: int
    judge_s: float
    teacher_s: float | None
    teacher_prompt_len: int | None
    scored: bool


@dataclass
class ReferenceOutput:
    """Dense zero-padded rows per sequence ([T][K]) and what each turn cost."""

    token_ids: list[list[list[int]]] = field(default_factory=list)
    logprobs: list[list[list[float]]] = field(default_factory=list)
    turns: list[ReferenceTurn] = field(default_factory=list)
    duration_s: float = 0.0


async def reference_process_group(
    trajectories: list[Trajectory],
    tokenizer: Any,
    judge: JudgeBackend,
    judge_config: JudgeConfig,
    teacher: TeacherScorer,
    *,
    max_next_state_chars: int = 4000,
) -> ReferenceOutput:
    """OPD for a finished group, the reference's way: one sequence, one turn, one request at a time."""
    started = time.perf_counter()
    out = ReferenceOutput()
    k = teacher.k
    codec = tokenizer_codec(tokenizer)
    for seq, trajectory in enumerate(trajectories):
        n = len(trajectory.tokens)
        dense_ids = [[0] * k for _ in range(n)]
        dense_lps = [[0.0] * k for _ in range(n)]
        for pair in extract_turn_pairs(trajectory, max_next_state_chars):
            if not pair.has_next_state or len(pair.span) == 0:
                continue
            judge_started = time.perf_counter()
            verdict = await judge_turn(pair, judge, judge_config)  # the m votes run concurrently
            judge_s = time.perf_counter() - judge_started
            if not verdict.accepted or not verdict.hint:
                out.turns.append(ReferenceTurn(seq, pair.turn_index, judge_s, None, None, False))
                continue
            teacher_input = build_canonical_teacher_input(
                trajectory, pair.span, verdict.hint, tokenizer, codec
            )
            teacher_started = time.perf_counter()
            student_ids = trajectory.tokens[pair.span.start : pair.span.end]
            scored = await teacher.score_turn(teacher_input.ids, teacher_input.prompt_len, student_ids)
            ids_rows, lp_rows = scored.ids_rows, scored.lp_rows
            teacher_s = time.perf_counter() - teacher_started
            for j, (row_ids, row_lps) in enumerate(zip(ids_rows, lp_rows, strict=True)):
                # Dense [K] rows: the top-K only (the reference has no K+1-th entry), zero-padded.
                top_ids, top_lps = row_ids[:k], row_lps[:k]
                dense_ids[pair.span.start + j] = top_ids + [0] * (k - len(top_ids))
                dense_lps[pair.span.start + j] = top_lps + [0.0] * (k - len(top_lps))
            out.turns.append(
                ReferenceTurn(seq, pair.turn_index, judge_s, teacher_s, teacher_input.prompt_len, True)
            )
        out.token_ids.append(dense_ids)
        out.logprobs.append(dense_lps)
    out.duration_s = time.perf_counter() - started
    return out
