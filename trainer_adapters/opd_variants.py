"""OPD loss variants (docs/trainers.md, "OPD knobs"): a vocabulary subset, a clip on the
teacher-minus-student gap, and a PPO-clipped OPD term weighted by the old policy. Pure torch
functions: no model, no batch type, no I/O.

Entries. Every function works on one table of E entries per position (leading dims N = any, e.g.
B, T): the ids of the teacher's row (its top-K, plus the student's own token where the env appended
it) followed by the student's own sampling-time top-K ids that the row does not hold. Per entry:
`in_teacher` (the id came from the teacher's row), `in_student` (the id is in the student's
sampling-time top-K) and `known` (the teacher's log-prob of the id is known: always for the row's
own entries; for a student id only when the teacher path returned it, see docs/distill-format.md,
"Student top-K"). An unknown teacher log-prob is never invented: the entry is left out of every
subset.

Subsets (`OPDVocab`):
- `teacher_topk`: the teacher row's entries (today's behaviour, unchanged);
- `student_topk`: the student's top-K ids with a known teacher log-prob;
- `overlap`: ids in both;
- `union`: ids in either, known.
The KL of `losses.topk_kl` over a subset keeps one tail bin (everything outside the subset), so it
stays a lower bound of the full-vocabulary KL whichever subset is chosen.

Gap clip. `clip_teacher_logprobs` replaces each teacher log-prob q by s + clip(q - s, -c, c), with s
the student's log-prob, detached: the target of each bin is at most a factor e^c away from the
student's current probability. For the KL this clips the gap (log p_s - log q) that multiplies each
gradient term; for the token term it is the same clip as `opd_advantage_clip`.
"""

from __future__ import annotations

from typing import Literal

import torch

from trainer_adapters.losses import (
    MIN_LOGPROB,
    LossTerm,
    _denominator,
    _masked_mean,
    clip_teacher_logprobs,
    ppo_clipped_objective,
)

__all__ = ["OPD_VOCABS", "OPDVocab", "clip_teacher_logprobs", "opd_subset_ppo_loss", "vocab_subset_mask"]

OPDVocab = Literal["teacher_topk", "student_topk", "overlap", "union"]
OPD_VOCABS: tuple[str, ...] = ("teacher_topk", "student_topk", "overlap", "union")


def vocab_subset_mask(
    in_teacher_NE: torch.Tensor, in_student_NE: torch.Tensor, known_NE: torch.Tensor, vocab: OPDVocab
) -> torch.Tensor:
    """The entries of the chosen subset (bool, same shape): only entries whose teacher log-prob is known."""
    if vocab == "teacher_topk":
        chosen = in_teacher_NE
    elif vocab == "student_topk":
        chosen = in_student_NE
    elif vocab == "overlap":
        chosen = in_teacher_NE & in_student_NE
    elif vocab == "union":
        chosen = in_teacher_NE | in_student_NE
    else:
        raise ValueError(f"unknown OPD vocabulary {vocab!r}; use one of {OPD_VOCABS}")
    return chosen & known_NE


def opd_subset_ppo_loss(
    logprobs_NE: torch.Tensor,
    old_logprobs_NE: torch.Tensor,
    teacher_logprobs_NE: torch.Tensor,
    subset_NE: torch.Tensor,
    *,
    diff_clip: float | None = None,
    clip_low: float = 0.2,
    clip_high: float = 0.28,
    num_tokens: float | int | torch.Tensor | None = None,
) -> LossTerm:
    """PPO-clipped OPD over a vocabulary subset, weighted by the old policy's probability.

    Per position: sum over v in the subset of pi_old(v) * min(r_v A_v, clip(r_v, 1-lo, 1+hi) A_v),
    with r_v = pi(v) / pi_old(v) and A_v = clip(log q(v) - log pi_old(v), -c, c) (no clip when
    `diff_clip` is None). The weights are the old probabilities themselves, not renormalised inside
    the subset, so the sum is the expectation under pi_old restricted to the subset. The loss is
    minus its mean over positions with at least one subset entry (or over `num_tokens`).
    """
    row_mask = subset_NE.any(dim=-1)
    denominator = _denominator(row_mask, num_tokens)
    old = old_logprobs_NE.detach().float().clamp(min=MIN_LOGPROB)
    teacher = torch.where(subset_NE, teacher_logprobs_NE.float(), old)
    gap = teacher - old
    advantage = gap if diff_clip is None else gap.clamp(-diff_clip, diff_clip)
    if diff_clip is not None and diff_clip <= 0:
        raise ValueError(f"opd_diff_clip must be > 0 (or null for no clip), got {diff_clip}")
    objective, ratio, ratio_clipped = ppo_clipped_objective(
        logprobs_NE.float(), old, advantage, subset_NE, clip_low=clip_low, clip_high=clip_high
    )
    weight = torch.where(subset_NE, old.exp(), torch.zeros_like(old))
    per_position = (weight * objective).sum(dim=-1)
    loss = -per_position.sum() / denominator
    with torch.no_grad():
        entries = subset_NE.sum(dim=-1).float()
        per_entry = entries.clamp(min=1.0)
        gap_clipped = (
            subset_NE & (gap.abs() > diff_clip) if diff_clip is not None else torch.zeros_like(subset_NE)
        )
        metrics = {
            "opd/subset_size": _masked_mean(entries, row_mask, denominator),
            "opd/subset_old_mass": _masked_mean(weight.sum(dim=-1), row_mask, denominator),
            "opd/diff_clip_frac": _masked_mean(gap_clipped.sum(dim=-1) / per_entry, row_mask, denominator),
            "opd/ppo_ratio_clip_frac": _masked_mean(
                ratio_clipped.sum(dim=-1) / per_entry, row_mask, denominator
            ),
            "opd/ppo_advantage": _masked_mean(
                (weight * torch.where(subset_NE, advantage, 0.0)).sum(dim=-1), row_mask, denominator
            ),
        }
    return LossTerm(loss, metrics)
