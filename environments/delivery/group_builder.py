"""Assemble finished rollouts into one Atropos `ScoredDataGroup` (pure logic)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from environments.pipeline.opd_config import OPDConfig
from environments.pipeline.opd_pipeline import SequenceDistill
from hermes_opd.contract.constants import MASKED
from hermes_opd.contract.process_reward import PRM_KEY, ProcessTurn, make_prm_block, process_advantages
from hermes_opd.contract.provenance import turn_provenance
from hermes_opd.contract.rows import empty_rows, sequence_distill
from hermes_opd.contract.student_topk import STUDENT_TOPK_KEY
from hermes_opd.record.student_topk_rows import student_topk_block
from hermes_opd.record.trajectory import Trajectory


@dataclass
class FinishedRollout:
    """One rollout after verification and OPD."""

    trajectory: Trajectory
    score: float
    distill: SequenceDistill | None
    info: dict[str, Any] = field(default_factory=dict)


def trim_after_last_turn(trajectory: Trajectory, max_length: int) -> Trajectory:
    """Drop trailing masked glue (the last tool results, the next generation prompt) when the record is
    longer than `max_length`. The next state stays in `messages`; generated tokens are never cut."""
    if len(trajectory.tokens) <= max_length:
        return trajectory
    last_end = trajectory.turns[-1].end if trajectory.turns else 0
    keep = max(last_end, max_length)
    if any(m != MASKED for m in trajectory.masks[keep:]):
        raise ValueError("cannot trim generated tokens")
    trajectory.tokens = trajectory.tokens[:keep]
    trajectory.masks = trajectory.masks[:keep]
    trajectory.inference_logprobs = trajectory.inference_logprobs[:keep]
    trajectory.content_ends = {i: e for i, e in trajectory.content_ends.items() if e <= keep}
    return trajectory


def has_distill_signal(group: dict[str, Any]) -> bool:
    """True when any sequence carries at least one scored turn, or a process reward that trains
    (an effective turn with a non-zero score): such a group teaches something even when its
    verifier scores are all equal."""
    for override in group.get("overrides") or []:
        for turn in (override or {}).get("opd", {}).get("turns", []):
            if turn.get("status") == "scored":
                return True
        for turn in ((override or {}).get(PRM_KEY) or {}).get("turns", []):
            if turn.get("effective") and turn.get("score"):
                return True
    return False


def build_group(
    rollouts: list[FinishedRollout],
    *,
    include_messages: bool,
    opd: OPDConfig,
    generation_params: dict[str, Any] | None = None,
    student_topk_k: int = 0,
) -> dict[str, Any]:
    """A `ScoredDataGroup` dict with tokens, masks, scores, inference_logprobs, distill rows, messages
    and per-sequence overrides (turn spans, OPD provenance, rollout info, and with `student_topk_k` > 0
    the sampler's own top-K rows the trajectory recorded, as `overrides[seq]["student_topk"]`). With
    `opd.prm.enabled`, `advantages` carries each sequence's per-turn process reward and
    `overrides[seq]["prm"]` says so (docs/distill-format.md, Process reward); a rollout whose
    pipeline failed gets every turn `skipped` and zero advantages."""
    group: dict[str, Any] = {
        "tokens": [],
        "masks": [],
        "scores": [],
        "inference_logprobs": [],
        "advantages": None,
        "ref_logprobs": None,
        "messages": [] if include_messages else None,
        "generation_params": generation_params or {},
        "group_overrides": {},
        "overrides": [],
        "images": None,
        "distill_token_ids": [],
        "distill_logprobs": [],
    }
    for rollout in rollouts:
        traj = rollout.trajectory
        group["tokens"].append(list(traj.tokens))
        group["masks"].append(list(traj.masks))
        group["scores"].append(float(rollout.score))
        group["inference_logprobs"].append(list(traj.inference_logprobs))
        if include_messages:
            group["messages"].append(traj.messages)
        spans = [[t.start, t.end] for t in traj.turns]
        if rollout.distill is not None:
            ids_rows, lp_rows = rollout.distill.ids_rows, rollout.distill.lp_rows
            opd_block = rollout.distill.opd
        else:
            skipped = [turn_provenance((t.start, t.end), t.message_index, "skipped") for t in traj.turns]
            ids_rows, lp_rows, opd_block = sequence_distill(
                opd.distill_mode,
                opd.distill_topk,
                traj.tokens,
                traj.masks,
                traj.inference_logprobs,
                empty_rows(len(traj.tokens)),
                spans,
                skipped,
            )
        group["distill_token_ids"].append(ids_rows)
        group["distill_logprobs"].append(lp_rows)
        override = {"turn_spans": spans, "opd": opd_block, **rollout.info}
        if student_topk_k > 0 and traj.student_topk:
            teacher = rollout.distill.student_topk_teacher if rollout.distill is not None else None
            override[STUDENT_TOPK_KEY] = student_topk_block(student_topk_k, traj.student_topk, teacher)
        if opd.prm.enabled:
            block, advantages = _process_reward(rollout, opd)
            override[PRM_KEY] = block
            group["advantages"] = [*(group["advantages"] or []), advantages]
        group["overrides"].append(override)
    return group


def _process_reward(rollout: FinishedRollout, opd: OPDConfig) -> tuple[dict[str, Any], list[float]]:
    """The rollout's PRM block and carrier; every turn `skipped` when the pipeline gave none."""
    distill = rollout.distill
    if distill is not None and distill.prm is not None and distill.prm_advantages is not None:
        return distill.prm, distill.prm_advantages
    traj = rollout.trajectory
    turns = [ProcessTurn((t.start, t.end), "skipped") for t in traj.turns]
    block = make_prm_block(
        turns,
        m=opd.prm.judge.m,
        backend=opd.prm.judge.backend,
        at_least_one_effective=opd.prm.at_least_one_effective,
    )
    return block, process_advantages(len(traj.tokens), turns)
