"""The OPD entry table of a collated batch: the teacher row's ids, then the student's own
sampling-time top-K ids that the row lacks (trainer_adapters/opd_variants.py, "Entries").

Both trainers gather the student's current logprobs at exactly `OPDEntries.ids_BTE` (the torch
trainer from its own log_softmax, the tinker adapter as extra `target_tokens` columns), so the
subset losses see the same numbers on either. Without student top-K rows in the batch the table is
the teacher rows themselves, column for column.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from trainer_adapters.collate import CollatedBatch


@dataclass(frozen=True)
class OPDEntries:
    """E = K teacher columns + S student columns per target position."""

    ids_BTE: torch.Tensor
    teacher_logprobs_BTE: torch.Tensor
    """float32: the teacher's logprob of each id; 0 where not known."""
    in_teacher_BTE: torch.Tensor
    in_student_BTE: torch.Tensor
    known_BTE: torch.Tensor
    """The teacher's logprob of the id is known (a real entry of its row, or returned for a student id)."""
    student_unknown: int
    """Student top-K ids at teacher positions, outside the teacher's row, whose teacher logprob is
    unknown: left out of every subset (logged as `opd/student_topk_unknown`)."""
    student_total: int
    """Student top-K ids at teacher positions outside the teacher's row."""


def opd_entries(batch: CollatedBatch) -> OPDEntries:
    """The entry table of `batch` (see the module docstring)."""
    t_ids, t_valid = batch.teacher_topk_ids_BTK, batch.teacher_topk_valid_BTK
    t_lps = batch.teacher_topk_logprobs_BTK.float()
    if batch.student_topk_ids_BTS is None:
        none = torch.zeros_like(t_valid)
        return OPDEntries(t_ids, t_lps, t_valid, none, t_valid, 0, 0)
    s_ids, s_valid = batch.student_topk_ids_BTS, batch.student_topk_valid_BTS
    s_valid = s_valid & batch.teacher_mask_BT[..., None]  # only where the teacher scored the position
    same = (s_ids[..., :, None] == t_ids[..., None, :]) & s_valid[..., :, None] & t_valid[..., None, :]
    teacher_in_student = same.any(dim=-2)
    extra = s_valid & ~same.any(dim=-1)
    s_teacher = batch.student_topk_teacher_logprobs_BTS.float()
    extra_known = extra & torch.isfinite(s_teacher)
    return OPDEntries(
        ids_BTE=torch.cat([t_ids, torch.where(extra, s_ids, torch.zeros_like(s_ids))], dim=-1),
        teacher_logprobs_BTE=torch.cat(
            [t_lps, torch.where(extra_known, s_teacher, torch.zeros_like(s_teacher))], dim=-1
        ),
        in_teacher_BTE=torch.cat([t_valid, torch.zeros_like(extra)], dim=-1),
        in_student_BTE=torch.cat([t_valid & teacher_in_student, extra], dim=-1),
        known_BTE=torch.cat([t_valid, extra_known], dim=-1),
        student_unknown=int((extra & ~extra_known).sum()),
        student_total=int(extra.sum()),
    )
