"""The training objective of one (micro-)batch: collated batch + student logprobs -> losses.

This is the only place that decides which tensor of a `CollatedBatch` feeds which loss; the losses
themselves (losses.py) know nothing about batches or configs.
"""

from __future__ import annotations

import torch

from trainer_adapters.collate import CollatedBatch
from trainer_adapters.losses import (
    LossBreakdown,
    LossTerm,
    combine_terms,
    grpo_loss,
    opd_token_loss,
    opd_topk_loss,
    prm_loss,
)
from trainer_adapters.opd_entries import OPDEntries, opd_entries
from trainer_adapters.opd_variants import opd_subset_ppo_loss, vocab_subset_mask
from trainer_adapters.student_logprobs import StudentLogprobs
from trainer_adapters.trainer_config import LossConfig


def needs_topk(config: LossConfig) -> bool:
    """Whether the student's logprobs of the OPD entries (`opd_entry_ids`) must be gathered."""
    return config.opd_mode in ("topk", "subset_ppo")


def opd_entry_ids(batch: CollatedBatch, config: LossConfig) -> torch.Tensor | None:
    """The ids whose student logprobs the OPD term needs ([B, T, E]), or None in token mode."""
    return opd_entries(batch).ids_BTE if needs_topk(config) else None


def _subset_term(
    student: StudentLogprobs, batch: CollatedBatch, config: LossConfig, num_teacher_positions: int | None
) -> LossTerm:
    """The topk / subset_ppo term over the configured vocabulary subset."""
    entries: OPDEntries = opd_entries(batch)
    if config.opd_vocab != "teacher_topk" and batch.student_topk_ids_BTS is None:
        raise ValueError(
            f"opd_vocab {config.opd_vocab!r} needs the sampler's own top-K rows "
            "(overrides[seq]['student_topk'], docs/distill-format.md), and this batch has none"
        )
    student_lps = student.topk_logprobs_BTK
    if student_lps is None or student_lps.shape != entries.ids_BTE.shape:
        got = None if student_lps is None else tuple(student_lps.shape)
        raise ValueError(
            f"opd_mode {config.opd_mode!r} needs student logprobs of the OPD entries "
            f"{tuple(entries.ids_BTE.shape)} (see opd_entry_ids), got {got}"
        )
    subset = vocab_subset_mask(
        entries.in_teacher_BTE, entries.in_student_BTE, entries.known_BTE, config.opd_vocab
    )
    teacher = entries.teacher_logprobs_BTE.to(student_lps)
    if config.opd_mode == "topk":
        term = opd_topk_loss(
            student_lps,
            teacher,
            subset,
            direction=config.kl_direction,
            diff_clip=config.opd_diff_clip,
            num_tokens=num_teacher_positions,
        )
    else:
        # The old policy is the one before this optimizer step, i.e. the current weights (one step per
        # batch): the ratio is 1 at the step and the clip bounds nothing yet (docs/trainers.md).
        term = opd_subset_ppo_loss(
            student_lps,
            student_lps.detach(),
            teacher,
            subset,
            diff_clip=config.opd_diff_clip,
            clip_low=config.opd_clip_low,
            clip_high=config.opd_clip_high,
            num_tokens=num_teacher_positions,
        )
    if batch.student_topk_ids_BTS is not None:
        # Per teacher position, like every metric (sums over micro-batches add up): the student's own
        # ids outside the teacher row, and those of them whose teacher logprob is unknown.
        denominator = float(max(num_teacher_positions or batch.num_teacher_positions, 1))
        term.metrics["opd/student_topk_extra"] = torch.tensor(entries.student_total / denominator)
        term.metrics["opd/student_topk_unknown"] = torch.tensor(entries.student_unknown / denominator)
    return term


def compute_objective(
    student: StudentLogprobs,
    batch: CollatedBatch,
    config: LossConfig,
    *,
    num_generated_tokens: int | None = None,
    num_teacher_positions: int | None = None,
    num_prm_positions: int | None = None,
) -> LossBreakdown:
    """Total = w_grpo * L_grpo + w_prm * L_prm + w_opd * L_opd: GRPO over generated tokens, the
    process reward over the effective PRM turns' positions (None when the batch has no process
    reward), OPD over positions with teacher rows. Each term is computed and logged on its own.
    `opd_sign` -1 (a control) turns w_opd into -w_opd.

    The three counts are the denominators of the token means; pass the counts of the whole optimizer
    step when `batch` is one micro-batch of it (defaults: this batch's own counts).
    """
    logprobs = student.token_logprobs_BT
    behaviour = batch.behaviour_logprobs(logprobs)
    grpo = grpo_loss(
        logprobs,
        behaviour,
        batch.advantages_BT.to(logprobs),
        batch.loss_mask_BT,
        clip_low=config.clip_low,
        clip_high=config.clip_high,
        num_tokens=num_generated_tokens,
    )
    if needs_topk(config):
        opd = _subset_term(student, batch, config, num_teacher_positions)
    else:
        opd = opd_token_loss(
            logprobs,
            batch.teacher_token_logprobs_BT.to(logprobs),
            batch.teacher_mask_BT,
            advantage_clip=config.token_gap_clip,
            behaviour_logprobs_BT=behaviour if config.opd_token_objective == "ppo" else None,
            clip_low=config.clip_low,
            clip_high=config.clip_high,
            num_tokens=num_teacher_positions,
        )
    prm = None
    if batch.prm_advantages_BT is not None and batch.prm_mask_BT is not None:
        prm = prm_loss(
            logprobs,
            behaviour,
            batch.prm_advantages_BT.to(logprobs),
            batch.prm_mask_BT,
            clip_low=config.prm_clip_low,
            clip_high=config.prm_clip_high,
            num_tokens=num_prm_positions,
        )
    return combine_terms(
        {
            "grpo": (config.w_grpo, grpo),
            "prm": (config.w_prm, prm),
            "opd": (config.w_opd * config.opd_sign, opd),
        }
    )
