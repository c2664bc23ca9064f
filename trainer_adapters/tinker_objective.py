"""The torch trainer's objective, run through tinker's `forward_backward_custom` (pure logic, no I/O).

One step sends ONE list of datums, one per sequence that carries any signal (a non-zero GRPO
advantage on a generated token, a non-zero process reward, or a teacher row), whatever the weights are:

- `target_tokens` int64: [T] in token mode (the student's own next tokens), [T, 1+E] in topk and
  subset_ppo modes (column 0 the student's token, columns 1..E the OPD entries of
  `opd_entries.py`: the teacher row's ids, then the student's own top-K ids the row lacks; 0 at
  entries whose teacher logprob is unknown or that do not exist);
- `weights` float32, the same shape: 1 where the entry is used (a generated token in column 0, a
  known entry elsewhere), 0 elsewhere. The forward pass of `forward_backward_custom` is
  tinker's `cross_entropy` over these targets, so the weights only shape the loss it reports; the
  gradient comes from the custom loss alone.

Tinker returns the student's logprobs of exactly those ids from one full-vocabulary softmax, which
is what `compute_objective` needs: the token logprob (GRPO, token OPD) and the row ids' logprobs
(the K+1-bin KL, whose tail is 1 minus their mass). `ObjectiveLossFn` scatters them back into the
collated batch's [B, T] / [B, T, E] layout and calls `compute_objective`, the very function the
torch trainer calls, so both trainers optimize the same loss: PPO-clipped GRPO with
`loss.clip_low`/`loss.clip_high`, the `LOG_RATIO_CAP`, token means over the whole step, and
`w_grpo * L_grpo + w_prm * L_prm + w_opd * L_opd` (the PRM term: the process reward the groups'
`advantages` carry, docs/process-reward.md). Every term is logged, weight 0 included.

Sequences without any signal are not sent (they add nothing to any term). For the logged metrics
their logprobs are taken to be the sampler's (ratio 1, no teacher row), i.e. on-policy.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from tinker import types as tt

from trainer_adapters.collate import CollatedBatch, CollateOptions, collate_groups
from trainer_adapters.losses import LossBreakdown
from trainer_adapters.objective import compute_objective
from trainer_adapters.opd_entries import opd_entries
from trainer_adapters.student_logprobs import StudentLogprobs
from trainer_adapters.trainer_config import LossConfig

TOPK_MODES = ("topk", "subset_ppo")
"""OPD modes that read the student's logprobs of the OPD entries (trainer_adapters/opd_entries.py)."""


def _tensor(array: np.ndarray) -> tt.TensorData:
    return tt.TensorData.from_numpy(np.ascontiguousarray(array))


def _length(batch: CollatedBatch, b: int) -> int:
    return int(batch.attention_mask_BT[b].sum().item())


def _prm_signal(batch: CollatedBatch) -> torch.Tensor:
    """[B, T] bool: a non-zero process reward on a position of the PRM term."""
    if batch.prm_advantages_BT is None or batch.prm_mask_BT is None:
        return torch.zeros_like(batch.loss_mask_BT)
    return (batch.prm_advantages_BT != 0) & batch.prm_mask_BT


def rows_with_signal(batch: CollatedBatch) -> list[int]:
    """Batch rows with a non-zero advantage (GRPO or PRM) on a generated token or at least one
    teacher row."""
    advantage = (batch.advantages_BT != 0) & batch.loss_mask_BT
    signal = advantage.any(dim=1) | batch.teacher_mask_BT.any(dim=1) | _prm_signal(batch).any(dim=1)
    return [int(b) for b in torch.nonzero(signal).flatten()]


def objective_datums(batch: CollatedBatch, rows: Sequence[int], *, mode: str) -> list[tt.Datum]:
    """One datum per row in `rows` (see the module docstring for the keys and shapes)."""
    entries = opd_entries(batch) if mode in TOPK_MODES else None
    datums = []
    for b in rows:
        t = _length(batch, b)
        student = batch.target_ids_BT[b, :t].numpy().astype(np.int64)
        generated = batch.loss_mask_BT[b, :t].numpy()
        if entries is not None:
            valid = entries.known_BTE[b, :t].numpy()
            ids = np.where(valid, entries.ids_BTE[b, :t].numpy(), 0).astype(np.int64)
            targets = np.concatenate([student[:, None], ids], axis=1)
            weights = np.concatenate([generated[:, None], valid], axis=1)
        else:
            targets, weights = student, generated
        datums.append(
            tt.Datum(
                model_input=tt.ModelInput.from_ints(batch.input_ids_BT[b, :t].tolist()),
                loss_fn_inputs={
                    "target_tokens": _tensor(targets),
                    "weights": _tensor(weights.astype(np.float32)),
                },
            )
        )
    return datums


def _pad(values: torch.Tensor, width: int) -> torch.Tensor:
    """Zero-pad dim 0 of `values` to `width` (differentiable)."""
    missing = width - values.shape[0]
    if missing == 0:
        return values
    return torch.cat([values, values.new_zeros((missing, *values.shape[1:]))], dim=0)


def student_from_service(
    batch: CollatedBatch, rows: Sequence[int], logprobs_list: Sequence[torch.Tensor], *, mode: str
) -> StudentLogprobs:
    """The service's logprobs, one tensor per datum, as `StudentLogprobs` in the batch layout.

    Rows that were not sent get the sampler's logprobs (ratio 1) and no top-K entries."""
    if len(rows) != len(logprobs_list):
        raise ValueError(f"{len(logprobs_list)} logprob tensors for {len(rows)} datums")
    width = batch.target_ids_BT.shape[1]
    topk = mode in TOPK_MODES
    k = opd_entries(batch).ids_BTE.shape[2] if topk else 0
    by_row = dict(zip(rows, logprobs_list, strict=True))
    tokens, topk_rows = [], []
    for b in range(batch.batch_size):
        t = _length(batch, b)
        lp = by_row.get(b)
        if lp is None:
            tokens.append(batch.inference_logprobs_BT[b].float())
            topk_rows.append(torch.zeros(width, k))
            continue
        lp = lp.float()
        expected = (t, 1 + k) if topk else (t,)
        if tuple(lp.shape) != expected:
            raise ValueError(f"row {b}: logprobs shape {tuple(lp.shape)}, expected {expected}")
        if topk:
            tokens.append(_pad(lp[:, 0], width))
            topk_rows.append(_pad(lp[:, 1:], width))
        else:
            tokens.append(_pad(lp, width))
    return StudentLogprobs(
        token_logprobs_BT=torch.stack(tokens),
        topk_logprobs_BTK=torch.stack(topk_rows) if topk else None,
    )


@dataclass
class ObjectiveLossFn:
    """The custom loss for `forward_backward_custom`: `compute_objective` on the service's logprobs.

    Called as fn(datums, logprobs_list) with one tensor per datum, shaped like its target_tokens.
    Returns (total, metrics); the last breakdown is kept in `last`."""

    config: LossConfig
    batch: CollatedBatch
    rows: list[int]
    last: LossBreakdown | None = field(default=None, repr=False)

    def breakdown(self, logprobs_list: Sequence[torch.Tensor]) -> LossBreakdown:
        student = student_from_service(self.batch, self.rows, logprobs_list, mode=self.config.opd_mode)
        self.last = compute_objective(student, self.batch, self.config)
        return self.last

    def __call__(
        self, data: list[tt.Datum], logprobs_list: list[torch.Tensor]
    ) -> tuple[torch.Tensor, dict[str, float]]:
        if len(data) != len(self.rows):
            raise ValueError(f"{len(data)} datums for {len(self.rows)} planned rows")
        out = self.breakdown(logprobs_list)
        return out.total, {key: float(value) for key, value in out.metrics.items()}


@dataclass
class ObjectiveStep:
    """What one step sends to the service, and whether it can move the weights at all."""

    batch: CollatedBatch
    rows: list[int]
    """Batch row of each datum."""
    datums: list[tt.Datum]
    loss_fn: ObjectiveLossFn
    trainable: bool
    """False when no term with a non-zero weight has anything to train on (e.g. w_opd = 0 and every
    score of the batch equal): the gradient is exactly zero, so no backward pass and no optim_step
    (Adam would still move the weights along its momentum)."""

    def metrics_without_service(self) -> dict[str, float]:
        """Every term and metric when no datum was sent (nothing to train, nothing to measure)."""
        if self.datums:
            raise ValueError("datums were planned; use the service's logprobs")
        with torch.no_grad():
            out = self.loss_fn.breakdown([])
        return {key: float(value) for key, value in out.metrics.items()}

    def metrics_from_forward(self, outputs: Sequence[dict[str, tt.TensorData]]) -> dict[str, float]:
        """Every term and metric from a forward-only pass's logprobs."""
        logprobs = [out["logprobs"].to_torch().float() for out in outputs]
        with torch.no_grad():
            out = self.loss_fn.breakdown(logprobs)
        return {key: float(value) for key, value in out.metrics.items()}


PER_DATUM_MEAN_LOSS_FN = "importance_sampling"
"""The built-in loss that carries the objective's gradient to a server that reduces per datum."""


def per_datum_mean_surrogate(
    datums: Sequence[tt.Datum], logprobs: Sequence[torch.Tensor], grads: Sequence[torch.Tensor]
) -> list[tt.Datum]:
    """The linear surrogate of the objective for a server whose built-in losses are reduced as
    mean over datums of (sum_t mask_t * loss_t / sum_t mask_t), mask = `weights` (default 1).

    `forward_backward_custom` sends weights w = -dC/dlp for `cross_entropy`; under that reduction
    each datum's gradient is divided by sum_t w_t, which is signed and often <= 0 (then clamped to
    1e-9). Here the gradient goes through `importance_sampling` instead, whose per-token loss is
    -exp(lp - q) A: with q = the forward pass's logprobs (ratio 1 at the current weights) and
    A = -dC/dlp * T_b * N (T_b the datum's length, its default mask's sum; N the datums of the
    step), the server's gradient is (1/N) sum_b (1/T_b) sum_t dC/dlp_t * T_b * N * d lp_t =
    dC/dtheta, exactly. Token-mode datums only ([T] targets)."""
    if not (len(datums) == len(logprobs) == len(grads)):
        raise ValueError(f"{len(datums)} datums, {len(logprobs)} logprob tensors, {len(grads)} gradients")
    count = len(datums)
    out = []
    for datum, lp, grad in zip(datums, logprobs, grads, strict=True):
        targets = datum.loss_fn_inputs["target_tokens"]
        length = int(grad.shape[0])
        if grad.dim() != 1 or tuple(lp.shape) != (length,):
            raise ValueError(
                f"per_datum_mean needs [T] targets (opd_mode: token), got logprobs {tuple(lp.shape)}"
            )
        advantages = (-grad.detach().double() * length * count).numpy().astype(np.float32)
        out.append(
            tt.Datum(
                model_input=datum.model_input,
                loss_fn_inputs={
                    "target_tokens": targets,
                    "logprobs": _tensor(lp.detach().numpy().astype(np.float32)),
                    "advantages": _tensor(advantages),
                },
            )
        )
    return out


def is_trainable(batch: CollatedBatch, config: LossConfig) -> bool:
    grpo = config.w_grpo != 0 and bool(((batch.advantages_BT != 0) & batch.loss_mask_BT).any())
    opd = config.w_opd != 0 and batch.num_teacher_positions > 0
    prm = config.w_prm != 0 and bool(_prm_signal(batch).any())
    return grpo or opd or prm


def build_objective_step(groups: Sequence[dict[str, Any]], config: LossConfig) -> ObjectiveStep:
    """Validate and collate `groups`, then plan the datums and the custom loss of one step."""
    batch = collate_groups(
        groups,
        CollateOptions(
            advantage_eps=config.advantage_eps, normalize_advantage_std=config.normalize_advantage_std
        ),
    )
    rows = rows_with_signal(batch)
    return ObjectiveStep(
        batch=batch,
        rows=rows,
        datums=objective_datums(batch, rows, mode=config.opd_mode),
        loss_fn=ObjectiveLossFn(config, batch, rows),
        trainable=is_trainable(batch, config),
    )
