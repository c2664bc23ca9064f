"""GRPO and OPD losses (docs/trainers.md, docs/distill-format.md) as pure torch functions: no model, no batch type, no I/O.

Shapes: B sequences, T target positions (already causally shifted, see collate.py), K teacher
entries per position. Inputs are log-probabilities; which temperature each one is at is set out in
docs/trainers.md ("Temperature"): the sampler's `inference_logprobs` and the teacher rows are raw
(temperature 1) and the student's are computed at temperature 1 by default, so they compare like
with like. The estimators also assume the tokens were sampled at temperature 1 (top_p 1); the env
refuses other training sampling settings unless told to accept the bias.

Normalisation. Every term is a token mean: a sum over its own positions divided by `num_tokens`.
The trainer passes the count over the whole optimizer step, so accumulating micro-batches gives the
same gradient as one big batch. Metrics use the same convention (a sum over positions divided by
the same count), so they too add up across micro-batches.

Independence. `combine_terms` adds `w_grpo * L_grpo + w_prm * L_prm + w_opd * L_opd` and leaves out
a term whose weight is 0, so w_opd = 0 gives exactly the GRPO gradient and vice versa. The GRPO
advantages (outcome), the process rewards (PRM, per turn) and the teacher rows (OPD) are separate
inputs; no term's quantity is ever written into another's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import torch

LOG_MASS_CAP = -1e-7
"""Largest log top-K mass allowed before computing the tail, i.e. the tail bin is never smaller
than about 1e-7. Without it, log(1 - mass) is -inf (and its gradient inf) when top-K mass -> 1."""

MIN_LOGPROB = -1e4
"""Floor for student logprobs inside the KL: exp(-1e4) is 0 in float32, and the floor keeps
0 * (-inf) out of the graph when a model emits -inf logits."""

LOG_RATIO_CAP = 20.0
"""Tokens with |log(pi / pi_behaviour)| above this are left out of the PPO objectives: a sampler
logprob that disagrees that wildly (stale data, a tokenizer mismatch) would otherwise make the
ratio inf and, with a negative advantage, the loss -inf. They are counted in
`grpo/ratio_capped_frac`, which should stay 0 in a healthy run."""

KLDirection = Literal["reverse", "forward"]


@dataclass
class LossTerm:
    """One loss term: a differentiable scalar plus detached metrics (each a sum / num_tokens)."""

    value: torch.Tensor
    metrics: dict[str, torch.Tensor] = field(default_factory=dict)


@dataclass
class LossBreakdown:
    """The combined objective and every term on its own (for logging)."""

    total: torch.Tensor
    terms: dict[str, torch.Tensor]
    """Detached value of each term before weighting, e.g. {'grpo': ..., 'opd': ...}."""
    metrics: dict[str, torch.Tensor]


def _denominator(mask: torch.Tensor, num_tokens: float | int | torch.Tensor | None) -> torch.Tensor:
    count = mask.sum() if num_tokens is None else torch.as_tensor(num_tokens, device=mask.device)
    return count.to(torch.float32).clamp(min=1.0)


def _masked_mean(values: torch.Tensor, mask: torch.Tensor, denominator: torch.Tensor) -> torch.Tensor:
    return torch.where(mask, values, torch.zeros_like(values)).sum() / denominator


def ppo_clipped_objective(
    logprobs_BT: torch.Tensor,
    behaviour_logprobs_BT: torch.Tensor,
    advantages_BT: torch.Tensor,
    mask_BT: torch.Tensor,
    *,
    clip_low: float,
    clip_high: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-token PPO objective min(r A, clip(r, 1-clip_low, 1+clip_high) A), r = exp(lp - lp_behaviour).

    Returns (objective_BT, ratio_BT, clipped_BT) with 0 / 1 / False at masked positions. The log
    ratio is taken only where `mask_BT` holds; a token beyond +-LOG_RATIO_CAP is left out (objective
    0, no gradient), so exp() never overflows and one absurd token cannot dominate the loss.
    """
    log_ratio = torch.where(mask_BT, logprobs_BT - behaviour_logprobs_BT, torch.zeros_like(logprobs_BT))
    mask_BT = mask_BT & (log_ratio.detach().abs() <= LOG_RATIO_CAP)
    ratio = torch.exp(log_ratio.clamp(-LOG_RATIO_CAP, LOG_RATIO_CAP))
    clipped_ratio = ratio.clamp(1.0 - clip_low, 1.0 + clip_high)
    unclipped = ratio * advantages_BT
    clipped = clipped_ratio * advantages_BT
    objective = torch.minimum(unclipped, clipped)
    was_clipped = mask_BT & (clipped < unclipped)
    return torch.where(mask_BT, objective, torch.zeros_like(objective)), ratio, was_clipped


def _ppo_term(
    prefix: str,
    logprobs_BT: torch.Tensor,
    behaviour_logprobs_BT: torch.Tensor,
    advantages_BT: torch.Tensor,
    mask_BT: torch.Tensor,
    *,
    clip_low: float,
    clip_high: float,
    num_tokens: float | int | torch.Tensor | None,
) -> LossTerm:
    """A PPO-clipped token mean over `mask_BT`, with its metrics under `prefix/`."""
    denominator = _denominator(mask_BT, num_tokens)
    objective, ratio, was_clipped = ppo_clipped_objective(
        logprobs_BT, behaviour_logprobs_BT, advantages_BT, mask_BT, clip_low=clip_low, clip_high=clip_high
    )
    loss = -objective.sum() / denominator
    with torch.no_grad():
        log_ratio = torch.log(ratio)
        capped = mask_BT & ((logprobs_BT - behaviour_logprobs_BT).abs() > LOG_RATIO_CAP)
        metrics = {
            f"{prefix}/clip_frac": was_clipped.sum() / denominator,
            f"{prefix}/ratio_capped_frac": capped.sum() / denominator,
            f"{prefix}/ratio_mean": _masked_mean(ratio, mask_BT, denominator),
            # k3 estimator of KL(sampler || current), >= 0 per token.
            f"{prefix}/approx_kl": _masked_mean(ratio - 1.0 - log_ratio, mask_BT, denominator),
            f"{prefix}/advantage_mean": _masked_mean(advantages_BT, mask_BT, denominator),
        }
    return LossTerm(loss, metrics)


def grpo_loss(
    logprobs_BT: torch.Tensor,
    behaviour_logprobs_BT: torch.Tensor,
    advantages_BT: torch.Tensor,
    mask_BT: torch.Tensor,
    *,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    num_tokens: float | int | torch.Tensor | None = None,
) -> LossTerm:
    """GRPO: PPO-clipped ratio against the sampler's logprobs, token mean over generated tokens.

    `advantages_BT` are the group-relative advantages (constant along a sequence unless the env
    sent per-token advantages); they are read, never modified.
    """
    return _ppo_term(
        "grpo",
        logprobs_BT,
        behaviour_logprobs_BT,
        advantages_BT,
        mask_BT,
        clip_low=clip_low,
        clip_high=clip_high,
        num_tokens=num_tokens,
    )


def prm_loss(
    logprobs_BT: torch.Tensor,
    behaviour_logprobs_BT: torch.Tensor,
    prm_advantages_BT: torch.Tensor,
    prm_mask_BT: torch.Tensor,
    *,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    num_tokens: float | int | torch.Tensor | None = None,
) -> LossTerm:
    """Binary RL: the PPO-clipped ratio with each turn's process score (+1 / -1 / 0) as the advantage
    of every token of the turn, token mean over the effective turns' positions (`prm_mask_BT`; a
    promoted 0 turn counts in the mean and carries no gradient). No groups: the score itself is the
    signal. Metrics under `prm/`, plus the share of positions with a positive / negative score."""
    term = _ppo_term(
        "prm",
        logprobs_BT,
        behaviour_logprobs_BT,
        prm_advantages_BT,
        prm_mask_BT,
        clip_low=clip_low,
        clip_high=clip_high,
        num_tokens=num_tokens,
    )
    with torch.no_grad():
        denominator = _denominator(prm_mask_BT, num_tokens)
        term.metrics["prm/positive_frac"] = (prm_mask_BT & (prm_advantages_BT > 0)).sum() / denominator
        term.metrics["prm/negative_frac"] = (prm_mask_BT & (prm_advantages_BT < 0)).sum() / denominator
    return term


def opd_token_loss(
    logprobs_BT: torch.Tensor,
    teacher_logprobs_BT: torch.Tensor,
    mask_BT: torch.Tensor,
    *,
    advantage_clip: float = 5.0,
    behaviour_logprobs_BT: torch.Tensor | None = None,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    num_tokens: float | int | torch.Tensor | None = None,
) -> LossTerm:
    """Token-level OPD: A_t = clip(teacher_lp - student_lp, -c, c), detached, at teacher positions.

    Without `behaviour_logprobs_BT` the surrogate is the plain policy gradient -A_t * lp_t, whose
    gradient is -A_t * d lp_t. With them it is the PPO-clipped ratio against the sampler's
    logprobs (useful when the data is a step or more stale). Either way the advantage is computed
    from the current student logprob and never flows a gradient.
    """
    denominator = _denominator(mask_BT, num_tokens)
    # A -inf student logprob (a token the student rules out) would make A_t and the loss infinite.
    gap = teacher_logprobs_BT - logprobs_BT.detach().clamp(min=MIN_LOGPROB)
    advantage = torch.where(mask_BT, gap.clamp(-advantage_clip, advantage_clip), torch.zeros_like(gap))
    if behaviour_logprobs_BT is None:
        surrogate = torch.where(
            mask_BT, advantage * logprobs_BT.clamp(min=MIN_LOGPROB), torch.zeros_like(logprobs_BT)
        )
        was_clipped = torch.zeros_like(mask_BT)
    else:
        surrogate, _, was_clipped = ppo_clipped_objective(
            logprobs_BT, behaviour_logprobs_BT, advantage, mask_BT, clip_low=clip_low, clip_high=clip_high
        )
    loss = -surrogate.sum() / denominator
    with torch.no_grad():
        metrics = {
            "opd/token_logprob_gap": _masked_mean(gap, mask_BT, denominator),
            "opd/token_advantage": _masked_mean(advantage, mask_BT, denominator),
            "opd/token_advantage_clip_frac": (mask_BT & (gap.abs() > advantage_clip)).sum() / denominator,
            "opd/token_ratio_clip_frac": was_clipped.sum() / denominator,
            # The token objective itself: mean (T - s)^2 / 2, whose gradient the surrogate follows
            # at positions inside the advantage clip. What a step on a fixed batch must lower.
            "opd/token_half_sq_gap": _masked_mean(gap.square() / 2, mask_BT, denominator),
            # k3 estimate of KL(student || teacher) on the batch's tokens, >= 0 per token.
            "opd/token_kl_k3": _masked_mean(torch.expm1(gap.clamp(max=20.0)) - gap, mask_BT, denominator),
        }
    return LossTerm(loss, metrics)


def clip_teacher_logprobs(
    student_logprobs: torch.Tensor, teacher_logprobs: torch.Tensor, diff_clip: float | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """(s + clip(q - s, -c, c), whether each entry was clipped), s detached; unchanged when c is None.

    The result carries no gradient: it is the target the student moves towards."""
    student = student_logprobs.detach().float().clamp(min=MIN_LOGPROB)
    teacher = teacher_logprobs.detach().float()
    if diff_clip is None:
        return teacher, torch.zeros_like(teacher, dtype=torch.bool)
    if diff_clip <= 0:
        raise ValueError(f"opd_diff_clip must be > 0 (or null for no clip), got {diff_clip}")
    gap = teacher - student
    return student + gap.clamp(-diff_clip, diff_clip), gap.abs() > diff_clip


def log_tail_mass(logprobs_NK: torch.Tensor, valid_NK: torch.Tensor) -> torch.Tensor:
    """log(1 - sum_k exp(logprobs_NK)) over valid entries, finite with finite gradients.

    Computed in log space as log(-expm1(logsumexp)), with logsumexp clamped to <= LOG_MASS_CAP:
    when the top-K mass -> 1 the tail floors at ~1e-7 instead of log(0) = -inf, and when the mass
    -> 0 (or the row is empty) the tail -> log(1) = 0. Invalid entries are filled with the dtype's
    lowest finite value rather than -inf so no inf - inf appears, even in the backward pass.
    """
    fill = torch.finfo(logprobs_NK.dtype).min
    masked = torch.where(valid_NK, logprobs_NK, torch.full_like(logprobs_NK, fill))
    log_mass = torch.logsumexp(masked, dim=-1).clamp(max=LOG_MASS_CAP)
    return torch.log(-torch.expm1(log_mass))


def _generalized_kl_terms(log_p: torch.Tensor, log_q: torch.Tensor) -> torch.Tensor:
    """p (log p - log q) - p + q per bin. Summed over a partition of the vocabulary this is exactly
    KL(p || q) (the -p + q parts cancel), but every term is >= 0 on its own, so the clamped tail
    cannot drive the sum negative."""
    p = log_p.exp()
    return p * (log_p - log_q) - p + log_q.exp()


def topk_kl(
    student_logprobs_NK: torch.Tensor,
    teacher_logprobs_NK: torch.Tensor,
    valid_NK: torch.Tensor,
    *,
    direction: KLDirection = "reverse",
    diff_clip: float | None = None,
) -> torch.Tensor:
    """KL over the row's bins plus one tail bin, per position (leading dims N = any, e.g. B, T).

    The bins are the valid entries of the teacher row (its top-K ids, plus the student's own token
    where the env appended it) and the tail, everything else. The ids of a row are distinct, so
    the bins partition the vocabulary and the result is a lower bound of the full-vocabulary KL.
    `reverse` is KL(student || teacher) = sum p_s (log p_s - log p_t), the mode-seeking direction
    used for OPD; `forward` is KL(teacher || student). Student logprobs must be gathered from one
    log_softmax over the whole vocabulary, so that the student tail is 1 - its mass on these ids.
    With `diff_clip` c, each teacher bin (the tail included) is replaced by its clipped target
    (`clip_teacher_logprobs`): s + clip(q - s, -c, c), so no bin's gap exceeds c.
    Returns 0 at positions with no valid entry.
    """
    student = torch.where(valid_NK, student_logprobs_NK.float().clamp(min=MIN_LOGPROB), 0.0)
    teacher = torch.where(valid_NK, teacher_logprobs_NK.float().clamp(min=MIN_LOGPROB), 0.0)
    student_tail = log_tail_mass(student, valid_NK)
    teacher_tail = log_tail_mass(teacher, valid_NK)
    if diff_clip is not None:
        teacher = torch.where(valid_NK, clip_teacher_logprobs(student, teacher, diff_clip)[0], 0.0)
        teacher_tail = clip_teacher_logprobs(student_tail, teacher_tail, diff_clip)[0]
    if direction == "reverse":
        bins = _generalized_kl_terms(student, teacher)
        tail = _generalized_kl_terms(student_tail, teacher_tail)
    elif direction == "forward":
        bins = _generalized_kl_terms(teacher, student)
        tail = _generalized_kl_terms(teacher_tail, student_tail)
    else:
        raise ValueError(f"unknown KL direction {direction!r}; use 'reverse' or 'forward'")
    bins = torch.where(valid_NK, bins, torch.zeros_like(bins))
    has_row = valid_NK.any(dim=-1)
    return torch.where(has_row, bins.sum(dim=-1) + tail, torch.zeros_like(tail))


def opd_topk_loss(
    student_topk_logprobs_BTK: torch.Tensor,
    teacher_topk_logprobs_BTK: torch.Tensor,
    valid_BTK: torch.Tensor,
    *,
    direction: KLDirection = "reverse",
    diff_clip: float | None = None,
    num_tokens: float | int | torch.Tensor | None = None,
) -> LossTerm:
    """Top-K OPD: KL over K+1 bins (see `topk_kl`), mean over positions that have a teacher row.

    `valid_BTK` may be any subset of a row's entries (trainer_adapters/opd_variants.py); the bins
    outside it fall into the tail. The logged KLs are unclipped; `opd/diff_clip_frac` is the share
    of a position's subset entries whose gap exceeds `diff_clip`."""
    row_mask_BT = valid_BTK.any(dim=-1)
    denominator = _denominator(row_mask_BT, num_tokens)
    kl_BT = topk_kl(
        student_topk_logprobs_BTK,
        teacher_topk_logprobs_BTK,
        valid_BTK,
        direction=direction,
        diff_clip=diff_clip,
    )
    loss = kl_BT.sum() / denominator
    with torch.no_grad():
        other = "forward" if direction == "reverse" else "reverse"
        other_kl = topk_kl(student_topk_logprobs_BTK, teacher_topk_logprobs_BTK, valid_BTK, direction=other)
        own_kl = (
            kl_BT
            if diff_clip is None
            else topk_kl(student_topk_logprobs_BTK, teacher_topk_logprobs_BTK, valid_BTK, direction=direction)
        )
        _, clipped = clip_teacher_logprobs(student_topk_logprobs_BTK, teacher_topk_logprobs_BTK, diff_clip)
        clipped = clipped & valid_BTK
        entries = valid_BTK.sum(dim=-1).float()
        neg = torch.finfo(torch.float32).min
        mass = {
            name: torch.logsumexp(torch.where(valid_BTK, lp.float(), neg), dim=-1).exp()
            for name, lp in (("student", student_topk_logprobs_BTK), ("teacher", teacher_topk_logprobs_BTK))
        }
        metrics = {
            f"opd/{direction}_kl": own_kl.sum() / denominator,
            "opd/clipped_objective": kl_BT.sum() / denominator,
            "opd/subset_size": _masked_mean(entries, row_mask_BT, denominator),
            "opd/diff_clip_frac": _masked_mean(
                clipped.sum(dim=-1) / entries.clamp(min=1.0), row_mask_BT, denominator
            ),
            f"opd/{other}_kl": other_kl.sum() / denominator,
            "opd/student_topk_mass": _masked_mean(mass["student"], row_mask_BT, denominator),
            "opd/teacher_topk_mass": _masked_mean(mass["teacher"], row_mask_BT, denominator),
        }
    return LossTerm(loss, metrics)


def combine_terms(terms: dict[str, tuple[float, LossTerm | None]]) -> LossBreakdown:
    """total = sum of weight * term over terms with a non-zero weight.

    A term with weight 0 is still reported (its value and metrics) but left out of `total`
    entirely, so it contributes exactly nothing to the gradient. A term may be None when the batch
    has nothing for it (e.g. no teacher rows); it then counts as 0.
    """
    total: torch.Tensor | None = None
    values: dict[str, torch.Tensor] = {}
    metrics: dict[str, torch.Tensor] = {}
    for name, (weight, term) in terms.items():
        if term is None:
            values[name] = torch.zeros(())
            continue
        values[name] = term.value.detach()
        metrics.update(term.metrics)
        if weight != 0.0:
            weighted = weight * term.value
            total = weighted if total is None else total + weighted
    if total is None:
        total = torch.zeros(())
    metrics["loss/total"] = total.detach()
    for name, value in values.items():
        metrics[f"loss/{name}"] = value
    return LossBreakdown(total=total, terms=values, metrics=metrics)
