"""The OPD pipeline for one finished rollout: every turn pair judged and scored concurrently, each
failure confined to its turn. With `prm.enabled`, the process-reward judge scores every turn too,
next to the hint judge (docs/process-reward.md).

turn pairs -> judge (m votes, bounded by the judge semaphore) -> hint tokens spliced into the
student's exact prefix -> teacher prompt logprobs (bounded by the teacher semaphore) -> rows placed
at the turn's own positions. A judge or teacher failure leaves that turn unscored with a status;
the sequence, its GRPO data and the other turns are untouched.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass, field, replace
from typing import Any

from environments.pipeline.opd_config import OPDConfig
from hermes_opd.contract.constants import TURN_STATUSES
from hermes_opd.contract.process_reward import ProcessTurn, make_prm_block, mark_effective, process_advantages
from hermes_opd.contract.provenance import turn_provenance
from hermes_opd.contract.rows import empty_rows, sequence_distill
from hermes_opd.record.hint_splice import NoHintAnchorError, build_canonical_teacher_input, tokenizer_codec
from hermes_opd.record.trajectory import Trajectory
from hermes_opd.record.turn_pairs import TurnPair, extract_turn_pairs
from judge.backends import JudgeBackend
from judge.hint_choice import TEACHER_POLICIES, TEXT_POLICIES, select_by_teacher, select_by_text
from judge.judge_turn import judge_process_turn, judge_turn
from scoring.teacher import TeacherScorer
from scoring.teacher_rows import place_turn_rows

logger = logging.getLogger(__name__)

__all__ = ["TURN_STATUSES", "OPDPipeline", "SequenceDistill", "TurnResult"]


@dataclass
class TurnResult:
    """What happened to one assistant turn."""

    pair: TurnPair
    status: str
    hint: str | None = None
    votes: dict[str, Any] | None = None
    ids_rows: list[list[int]] | None = None
    lp_rows: list[list[float]] | None = None
    teacher_prompt_len: int | None = None
    hint_insert_at: int | None = None
    replaced_range: tuple[int, int] | None = None
    replacement_ids: list[int] | None = None
    judge_latency_s: float | None = None
    teacher_latency_s: float | None = None
    teacher_path: str | None = None
    error: str | None = None
    hint_selection: dict[str, Any] | None = None
    """How the hint was chosen among the accepted votes' hints (judge/hint_choice.py)."""
    student_topk_teacher: list[list[float | None]] | None = None
    """The teacher's logprob of the student's sampling-time top-K ids at each turn position, when
    the trajectory recorded them (None entries: unknown on a vLLM path)."""

    def provenance(self) -> dict[str, Any]:
        span = self.pair.span
        return turn_provenance(
            (span.start, span.end),
            span.message_index,
            self.status,
            next_state_role=self.pair.next_state_role,
            votes=self.votes,
            hint=self.hint,
            hint_insert_at=self.hint_insert_at,
            replaced_range=self.replaced_range,
            replacement_ids=self.replacement_ids,
            teacher_prompt_len=self.teacher_prompt_len,
            teacher_path=self.teacher_path,
            error=self.error,
            hint_selection=self.hint_selection,
        )


@dataclass
class SequenceDistill:
    """Distill rows and provenance for one sequence, plus what the metrics need."""

    ids_rows: list[list[int]]
    lp_rows: list[list[float]]
    opd: dict[str, Any]
    turns: list[TurnResult] = field(default_factory=list)
    advantages: list[float] = field(default_factory=list)
    """A_t = teacher_lp(student token) - inference_lp at every scored position."""
    student_in_topk: int = 0
    student_topk_teacher: dict[int, list[float | None]] = field(default_factory=dict)
    """Position -> the teacher's logprob of each student top-K id there, at scored positions."""
    scored_positions: int = 0
    generated_positions: int = 0
    duration_s: float = 0.0
    prm: dict[str, Any] | None = None
    """The process-reward block (`overrides[seq]["prm"]`, hermes_opd/contract/process_reward.py),
    None when the process judge is off."""
    prm_advantages: list[float] | None = None
    """Its carrier, the sequence's `advantages`: each effective turn's score over its span, else 0."""


class OPDPipeline:
    """Turns a finished trajectory into distill rows. Safe to share across concurrent rollouts."""

    def __init__(
        self,
        tokenizer: Any,
        judge: JudgeBackend | None,
        teacher: TeacherScorer | None,
        config: OPDConfig,
        prm_judge: JudgeBackend | None = None,
    ) -> None:
        """`judge` and `teacher` may be None only with `config.enabled` False (process reward alone);
        `prm_judge` is the process-reward backend, required with `config.prm.enabled`."""
        if config.prm.enabled and prm_judge is None:
            raise ValueError(
                "prm.enabled needs a process-reward judge backend (make_judge_backend(kind='prm'))"
            )
        self.tokenizer = tokenizer
        self.judge = judge
        self.teacher = teacher
        self.prm_judge = prm_judge
        self.config = config
        self.judge_semaphore = asyncio.Semaphore(config.judge_concurrency)
        self._codec = tokenizer_codec(tokenizer)

    async def aclose(self) -> None:
        """Close the judges' and the teacher's HTTP sessions."""
        for part in (self.judge, self.teacher, self.prm_judge):
            if part is not None:
                with contextlib.suppress(Exception):
                    await part.aclose()

    async def process(
        self, trajectory: Trajectory, *, prm_already_effective: bool = False
    ) -> SequenceDistill:
        """Rows, provenance and (with `prm.enabled`) process rewards of one sequence.
        `prm_already_effective`: an earlier sequence of the same session already has an effective
        process-reward turn (hermes_opd/contract/process_reward.py, `mark_effective`)."""
        started = time.perf_counter()
        pairs = extract_turn_pairs(trajectory, self.config.hint_max_next_state_chars)
        hint_turns = [
            self._process_turn(trajectory, p) if self.config.enabled else _skipped(p) for p in pairs
        ]
        prm_run = self.process_rewards(pairs, already_effective=prm_already_effective)
        *results, prm_turns = await asyncio.gather(*hint_turns, prm_run)
        ids_rows, lp_rows = empty_rows(len(trajectory.tokens))
        distill = SequenceDistill(ids_rows=ids_rows, lp_rows=lp_rows, opd={}, turns=results)
        distill.generated_positions = sum(1 for m in trajectory.masks if m != -100)
        for result in results:
            if result.status != "scored":
                continue
            span = result.pair.span
            try:
                place_turn_rows(ids_rows, lp_rows, span.start, result.ids_rows, result.lp_rows)
            except ValueError as exc:  # cannot happen for disjoint spans; keep the turn out if it does
                result.status, result.error = "teacher_error", f"placement: {exc}"
                continue
            for j, (row_ids, row_lps) in enumerate(zip(result.ids_rows, result.lp_rows, strict=True)):
                pos = span.start + j
                token = trajectory.tokens[pos]
                at = row_ids.index(token)
                distill.advantages.append(row_lps[at] - trajectory.inference_logprobs[pos])
                distill.student_in_topk += int(at < self.config.distill_topk)
                distill.scored_positions += 1
            for j, row in enumerate(result.student_topk_teacher or []):
                distill.student_topk_teacher[span.start + j] = row
        distill.ids_rows, distill.lp_rows, distill.opd = sequence_distill(
            self.config.distill_mode,
            self.config.distill_topk,
            trajectory.tokens,
            trajectory.masks,
            trajectory.inference_logprobs,
            (ids_rows, lp_rows),
            [(t.start, t.end) for t in trajectory.turns],
            [r.provenance() for r in results],
        )
        if trajectory.template_history is not None:
            distill.opd["template_history"] = dict(trajectory.template_history)
        if prm_turns is not None:
            prm = self.config.prm
            distill.prm = make_prm_block(
                prm_turns,
                m=prm.judge.m,
                backend=getattr(self.prm_judge, "name", "?"),
                at_least_one_effective=prm.at_least_one_effective,
            )
            distill.prm_advantages = process_advantages(len(trajectory.tokens), prm_turns)
        distill.duration_s = time.perf_counter() - started
        return distill

    async def process_rewards(
        self, pairs: list[TurnPair], *, already_effective: bool = False
    ) -> list[ProcessTurn] | None:
        """Every turn's process reward (the m votes of the process judge, concurrently, each
        failure confined to its turn) with the effective turns marked; None when the judge is off."""
        if not self.config.prm.enabled or self.prm_judge is None:
            return None
        judged = await asyncio.gather(*(self._process_reward(p) for p in pairs))
        effective = mark_effective(
            [t.score if t.status == "scored" else None for t in judged],
            at_least_one=self.config.prm.at_least_one_effective,
            already_effective=already_effective,
        )
        return [replace(t, effective=mark) for t, mark in zip(judged, effective, strict=True)]

    async def _process_reward(self, pair: TurnPair) -> ProcessTurn:
        span = (pair.span.start, pair.span.end)
        if not pair.has_next_state:
            return ProcessTurn(span, "no_next_state")
        if len(pair.span) == 0:
            return ProcessTurn(span, "skipped")
        assert self.prm_judge is not None
        try:
            async with self.judge_semaphore:
                verdict = await judge_process_turn(pair, self.prm_judge, self.config.prm.judge)
        except Exception as exc:  # noqa: BLE001 - a judge failure leaves this turn without a reward
            logger.warning("turn %d: process judge: %s: %s", pair.turn_index, type(exc).__name__, exc)
            return ProcessTurn(span, "judge_error", error=f"{type(exc).__name__}: {exc}"[:300])
        return ProcessTurn(span, "scored", verdict.score, False, verdict.as_dict())

    async def _process_turn(self, trajectory: Trajectory, pair: TurnPair) -> TurnResult:
        if not pair.has_next_state:
            return TurnResult(pair, "no_next_state")
        if len(pair.span) == 0:
            return TurnResult(pair, "skipped", error="empty turn")
        if trajectory.hint_anchor(pair.span) is None:  # no place for a hint: don't ask the judge
            return TurnResult(pair, "no_anchor", error="the template transformed the hint target's content")
        result = TurnResult(pair, "judge_error")
        started = time.perf_counter()
        try:
            async with self.judge_semaphore:  # the turn's deadline is JudgeConfig.turn_deadline_s
                verdict = await judge_turn(pair, self.judge, self.config.judge)
        except Exception as exc:  # noqa: BLE001 - any judge failure stays inside this turn
            result.judge_latency_s = time.perf_counter() - started
            result.error = f"judge: {type(exc).__name__}: {exc}"
            logger.warning("turn %d: %s", pair.turn_index, result.error)
            return result
        result.judge_latency_s = verdict.latency_s
        result.votes = verdict.as_dict()
        if not verdict.accepted or not verdict.hint:
            result.status = "no_hint"
            return result
        result.hint = verdict.hint
        policy = self.config.judge.hint_choice
        candidates = list(dict.fromkeys(verdict.outcome.candidates)) or [verdict.hint]
        teacher_choice = policy in TEACHER_POLICIES and len(candidates) > 1
        if not teacher_choice:
            selection = select_by_text(
                list(verdict.outcome.candidates) or [verdict.hint],
                policy if policy in TEXT_POLICIES else "representative",
            )
            result.hint_selection = selection.as_dict()
            candidates = [selection.hint]
        try:
            inputs = [
                build_canonical_teacher_input(trajectory, pair.span, hint, self.tokenizer, self._codec)
                for hint in candidates
            ]
        except NoHintAnchorError as exc:
            result.status, result.error = "no_anchor", str(exc)
            return result
        except ValueError as exc:
            result.status, result.error = "skipped", str(exc)
            return result
        try:
            student_ids = trajectory.tokens[pair.span.start : pair.span.end]
            student_topk = _student_topk_ids(trajectory, pair.span.start, pair.span.end)
            if teacher_choice:
                scored_all, latency = await self.teacher.score_candidates(
                    [(ti.ids, ti.prompt_len) for ti in inputs], student_ids, student_topk
                )
                # Without the student's sampling-time top-K recorded, its sampled token stands for it
                # (student_k = 1 in the provenance).
                selection = select_by_teacher(
                    candidates,
                    [s.ids_rows for s in scored_all],
                    student_topk or [[t] for t in student_ids],
                    self.teacher.k,
                    policy,
                )
                result.hint_selection = {**selection.as_dict(), "teacher_latency_s": round(latency, 4)}
                result.hint = selection.hint
                teacher_input, scored = inputs[selection.winner], scored_all[selection.winner]
            else:
                teacher_input = inputs[0]
                scored = await self.teacher.score_turn(
                    teacher_input.ids, teacher_input.prompt_len, student_ids, student_topk
                )
        except Exception as exc:  # noqa: BLE001 - a teacher failure leaves the turn unscored
            result.status = "teacher_error"
            result.error = f"teacher: {type(exc).__name__}: {exc}"
            logger.warning("turn %d: %s", pair.turn_index, result.error)
            return result
        result.status = "scored"
        result.ids_rows, result.lp_rows = scored.ids_rows, scored.lp_rows
        result.student_topk_teacher = scored.student_topk_teacher
        result.teacher_prompt_len = teacher_input.prompt_len
        result.hint_insert_at = teacher_input.hint_insert_at
        result.replaced_range = teacher_input.replaced
        result.replacement_ids = teacher_input.replacement_ids
        result.teacher_latency_s = scored.stats.latency_s
        result.teacher_path = scored.stats.path
        return result


async def _skipped(pair: TurnPair) -> TurnResult:
    """A turn the hint judge is not asked about (OPD off, process reward alone)."""
    return TurnResult(pair, "skipped")


def _student_topk_ids(trajectory: Trajectory, start: int, end: int) -> list[list[int]] | None:
    """The student's sampling-time top-K ids at positions [start, end), or None when the trajectory
    has no such rows (the policy was not asked for them)."""
    if not trajectory.student_topk:
        return None
    return [list(trajectory.student_topk.get(p, ([], []))[0]) for p in range(start, end)]
