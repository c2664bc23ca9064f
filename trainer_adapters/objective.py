"""The training objective of one (micro-)batch: collated batch + student logprobs -> losses.

This is the only place that decides which tensor of a `CollatedBatch` feeds which loss; the losses
themselves (losses.py) know nothing about batches or configs.
"""

from __future__ import annotations

from trainer_adapters.collate import CollatedBatch
from trainer_adapters.losses import LossBreakdown, combine_terms, grpo_loss, opd_token_loss, opd_topk_loss
from trainer_adapters.student_logprobs import StudentLogprobs
from trainer_adapters.trainer_config import LossConfig


def needs_topk(config: LossConfig) -> bool:
    """Whether the student's logprobs of the teacher's top-K ids must be gathered."""
    return config.opd_mode == "topk"


def compute_objective(
    student: StudentLogprobs,
    batch: CollatedBatch,
    config: LossConfig,
    *,
    num_generated_tokens: int | None = None,
    num_teacher_positions: int | None = None,
) -> LossBreakdown:
    """GRPO over generated tokens plus OPD over positions with teacher rows, weighted and combined.

    The two counts are the denominators of the token means; pass the counts of the whole optimizer
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
    if config.opd_mode == "topk":
        if student.topk_logprobs_BTK is None:
            raise ValueError("opd_mode 'topk' needs the student's top-K logprobs (see needs_topk)")
        opd = opd_topk_loss(
            student.topk_logprobs_BTK,
            batch.teacher_topk_logprobs_BTK.to(logprobs),
            batch.teacher_topk_valid_BTK,
            direction=config.kl_direction,
            num_tokens=num_teacher_positions,
        )
    else:
        opd = opd_token_loss(
            logprobs,
            batch.teacher_token_logprobs_BT.to(logprobs),
            batch.teacher_mask_BT,
            advantage_clip=config.opd_advantage_clip,
            behaviour_logprobs_BT=behaviour if config.opd_token_objective == "ppo" else None,
            clip_low=config.clip_low,
            clip_high=config.clip_high,
            num_tokens=num_teacher_positions,
        )
    return combine_terms({"grpo": (config.w_grpo, grpo), "opd": (config.w_opd, opd)})
