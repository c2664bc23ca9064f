"""Train through the tinker service: GRPO on a built-in loss, OPD through a custom loss.

Per Atropos batch (one optimizer step):
1. GRPO datums -> `forward_backward(datums, "importance_sampling" | "ppo")`. Tinker's built-in
   losses are SUMS over tokens, so the advantages are pre-scaled by w_grpo / (generated tokens in
   the batch): the gradient is then w_grpo times the token-mean GRPO gradient of the torch trainer
   (PPO clipping is unaffected by a positive scale).
2. OPD datums -> `forward_backward_custom(datums, loss_fn)`. In topk mode `target_tokens` and
   `weights` are [T, K]: the teacher's row ids and a 0/1 validity mask. Tinker returns the
   student's logprobs of exactly those ids from its full-vocabulary softmax, which is all the
   reverse KL over K+1 bins needs (the tail is 1 - their mass), and `loss_fn` is the same
   `opd_topk_loss` the torch trainer uses. Token mode uses [T] targets (the student's tokens).
3. One `optim_step` after both; gradients accumulate on the service until then.

Nothing here needs the service to be tested: datums are real `tinker.Datum`s and `loss_fn` is a
plain function of (datums, logprobs tensors). The GRPO advantages are never overwritten by OPD
(unlike stock tinker-atropos, see docs/trainers.md) and equal-score groups still train OPD.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tinker import types as tt

from trainer_adapters.atropos_client import AtroposClient, Backoff, Registration
from trainer_adapters.collate import CollatedBatch, CollateOptions, collate_groups
from trainer_adapters.losses import grpo_loss, opd_token_loss, opd_topk_loss
from trainer_adapters.metrics_log import MetricsLog
from trainer_adapters.trainer_config import LossConfig, TinkerTrainerConfig

logger = logging.getLogger(__name__)

TEACHER_LOGPROBS_KEY = "teacher_logprobs"
"""Extra loss_fn_inputs key read by the custom loss. The SDK runs a callable loss client-side and
sends only target_tokens and weights to the service, so extra keys never leave this process."""

CustomLossFn = Callable[[list[tt.Datum], list[torch.Tensor]], tuple[torch.Tensor, dict[str, float]]]


def _tensor(array: np.ndarray) -> tt.TensorData:
    return tt.TensorData.from_numpy(np.ascontiguousarray(array))


def _length(batch: CollatedBatch, b: int) -> int:
    return int(batch.attention_mask_BT[b].sum().item())


def grpo_datums(batch: CollatedBatch, *, weight: float, num_tokens: int) -> tuple[list[tt.Datum], list[int]]:
    """One datum per sequence with a non-zero advantage somewhere (others add no gradient), and
    the batch rows they came from.

    Keys (all [T]): target_tokens int64, logprobs float32 (the sampler's, 0 where not generated),
    advantages float32 (scaled by weight / num_tokens, 0 where not generated)."""
    scale = weight / max(num_tokens, 1)
    datums, rows = [], []
    for b in range(batch.batch_size):
        t = _length(batch, b)
        mask = batch.loss_mask_BT[b, :t].numpy()
        advantages = np.where(mask, batch.advantages_BT[b, :t].numpy() * scale, 0.0).astype(np.float32)
        if not advantages.any():
            continue
        if not bool(batch.has_inference_logprobs_B[b]):
            raise ValueError(
                f"sequence {b} (group {int(batch.group_index_B[b])}) has no inference_logprobs; "
                "tinker's importance_sampling/ppo losses need the sampler's logprobs"
            )
        rows.append(b)
        datums.append(
            tt.Datum(
                model_input=tt.ModelInput.from_ints(batch.input_ids_BT[b, :t].tolist()),
                loss_fn_inputs={
                    "target_tokens": _tensor(batch.target_ids_BT[b, :t].numpy().astype(np.int64)),
                    "logprobs": _tensor(batch.inference_logprobs_BT[b, :t].numpy().astype(np.float32)),
                    "advantages": _tensor(advantages),
                },
            )
        )
    return datums, rows


def opd_datums(batch: CollatedBatch, *, mode: str) -> list[tt.Datum]:
    """One datum per sequence that has at least one teacher row.

    topk: target_tokens int64 [T, K] (teacher row ids, 0 at invalid entries), weights float32
    [T, K] (1 valid / 0 invalid), teacher_logprobs float32 [T, K].
    token: the same keys shaped [T]: the student's own tokens, 1 where a row exists, and the
    teacher's logprob of the student's token."""
    datums = []
    for b in range(batch.batch_size):
        t = _length(batch, b)
        if not bool(batch.teacher_mask_BT[b, :t].any()):
            continue
        if mode == "topk":
            valid = batch.teacher_topk_valid_BTK[b, :t].numpy()
            targets = np.where(valid, batch.teacher_topk_ids_BTK[b, :t].numpy(), 0).astype(np.int64)
            teacher = np.where(valid, batch.teacher_topk_logprobs_BTK[b, :t].numpy(), 0.0)
        else:
            valid = batch.teacher_mask_BT[b, :t].numpy()
            targets = batch.target_ids_BT[b, :t].numpy().astype(np.int64)
            teacher = np.where(valid, batch.teacher_token_logprobs_BT[b, :t].numpy(), 0.0)
        datums.append(
            tt.Datum(
                model_input=tt.ModelInput.from_ints(batch.input_ids_BT[b, :t].tolist()),
                loss_fn_inputs={
                    "target_tokens": _tensor(targets),
                    "weights": _tensor(valid.astype(np.float32)),
                    TEACHER_LOGPROBS_KEY: _tensor(teacher.astype(np.float32)),
                },
            )
        )
    return datums


@dataclass
class OPDLossFn:
    """The custom loss for `forward_backward_custom`: w_opd * (the torch trainer's OPD term).

    Called as fn(datums, logprobs_list) with logprobs shaped like each datum's target_tokens.
    `num_teacher_positions` is the step's count, so the loss is a token mean over the step.
    The last call's metrics are kept in `last_metrics`."""

    config: LossConfig
    num_teacher_positions: int
    last_metrics: dict[str, float] = field(default_factory=dict)

    def __call__(
        self, data: list[tt.Datum], logprobs_list: list[torch.Tensor]
    ) -> tuple[torch.Tensor, dict[str, float]]:
        if len(data) != len(logprobs_list):
            raise ValueError(f"{len(data)} datums but {len(logprobs_list)} logprob tensors")
        total = torch.zeros(())
        metrics: dict[str, float] = {}
        for datum, logprobs in zip(data, logprobs_list, strict=True):
            valid = datum.loss_fn_inputs["weights"].to_torch() > 0
            teacher = datum.loss_fn_inputs[TEACHER_LOGPROBS_KEY].to_torch().float()
            if logprobs.shape != valid.shape:
                raise ValueError(
                    f"logprobs shape {tuple(logprobs.shape)} != target shape {tuple(valid.shape)}"
                )
            if self.config.opd_mode == "topk":
                term = opd_topk_loss(
                    logprobs[None],
                    teacher[None],
                    valid[None],
                    direction=self.config.kl_direction,
                    num_tokens=self.num_teacher_positions,
                )
            else:
                term = opd_token_loss(
                    logprobs[None],
                    teacher[None],
                    valid[None],
                    advantage_clip=self.config.opd_advantage_clip,
                    num_tokens=self.num_teacher_positions,
                )
            total = total + term.value
            for key, value in term.metrics.items():
                metrics[key] = metrics.get(key, 0.0) + float(value)
        metrics["loss/opd"] = float(total.detach())
        self.last_metrics = metrics
        return self.config.w_opd * total, dict(metrics)


@dataclass
class TinkerStep:
    """What one step sends to the service."""

    grpo: list[tt.Datum]
    grpo_rows: list[int]
    """Batch row of each GRPO datum."""
    opd: list[tt.Datum]
    opd_loss_fn: OPDLossFn
    batch: CollatedBatch


def build_step(groups: Sequence[dict[str, Any]], config: LossConfig) -> TinkerStep:
    """Validate and collate `groups`, then build both datum lists and the OPD loss function."""
    batch = collate_groups(
        groups,
        CollateOptions(
            advantage_eps=config.advantage_eps, normalize_advantage_std=config.normalize_advantage_std
        ),
    )
    if config.opd_mode == "token" and config.opd_token_objective == "ppo":
        raise ValueError("the tinker adapter implements token-level OPD as 'pg' only")
    grpo, grpo_rows = (
        grpo_datums(batch, weight=config.w_grpo, num_tokens=batch.num_generated_tokens)
        if config.w_grpo
        else ([], [])
    )
    return TinkerStep(
        grpo=grpo,
        grpo_rows=grpo_rows,
        opd=opd_datums(batch, mode=config.opd_mode) if config.w_opd else [],
        opd_loss_fn=OPDLossFn(config, batch.num_teacher_positions),
        batch=batch,
    )


def grpo_metrics_from_outputs(
    step: TinkerStep, outputs: list[dict[str, tt.TensorData]], config: LossConfig
) -> dict[str, float]:
    """The torch trainer's GRPO term and metrics, recomputed from the service's training logprobs
    (so both trainers log the same quantity)."""
    batch = step.batch
    used = step.grpo_rows
    if len(used) != len(outputs):
        raise ValueError(f"{len(outputs)} GRPO outputs for {len(used)} datums")
    logprobs = torch.zeros_like(batch.inference_logprobs_BT)
    for b, out in zip(used, outputs, strict=True):
        lp = out["logprobs"].to_torch().float()
        logprobs[b, : lp.shape[0]] = lp
    mask = batch.loss_mask_BT.clone()
    unused = torch.ones(batch.batch_size, dtype=torch.bool)
    unused[used] = False
    mask[unused] = False  # sequences without a datum had zero advantage: they contribute 0 either way
    term = grpo_loss(
        logprobs,
        batch.inference_logprobs_BT,
        batch.advantages_BT,
        mask,
        clip_low=config.clip_low,
        clip_high=config.clip_high,
        num_tokens=batch.num_generated_tokens,
    )
    return {"loss/grpo": float(term.value), **{k: float(v) for k, v in term.metrics.items()}}


class TinkerOPDTrainer:
    """The step loop against a tinker `TrainingClient` (or anything with the same methods)."""

    def __init__(
        self,
        config: TinkerTrainerConfig,
        training_client: Any,
        *,
        on_new_sampler: Callable[[str, int], None] | None = None,
        step: int = 0,
    ) -> None:
        self.config = config
        self.training_client = training_client
        self.on_new_sampler = on_new_sampler
        self.step = step
        self.metrics_log = MetricsLog(config.logging.metrics_path, stdout=config.logging.stdout)

    def adam_params(self) -> tt.AdamParams:
        t = self.config.tinker
        return tt.AdamParams(
            learning_rate=t.learning_rate,
            beta1=t.beta1,
            beta2=t.beta2,
            eps=t.eps,
            weight_decay=t.weight_decay,
            grad_clip_norm=t.grad_clip_norm,
        )

    def train_step(self, groups: Sequence[dict[str, Any]]) -> dict[str, float]:
        loss = self.config.loss
        step = build_step(groups, loss)
        grpo_future = opd_future = None
        if step.grpo:
            grpo_future = self.training_client.forward_backward(
                step.grpo, self.config.tinker.grpo_loss_fn, self.config.tinker.grpo_loss_fn_config
            )
        if step.opd:
            opd_future = self.training_client.forward_backward_custom(step.opd, step.opd_loss_fn)
        # Nothing sent (e.g. w_opd = 0 and all scores equal): no optim_step either, since Adam would
        # still move the weights along its stale momentum.
        optim_future = self.training_client.optim_step(self.adam_params()) if step.grpo or step.opd else None
        metrics: dict[str, float] = {}
        if grpo_future is not None:
            result = grpo_future.result()
            metrics.update(grpo_metrics_from_outputs(step, result.loss_fn_outputs, loss))
            metrics["grpo/service_loss_sum"] = float(result.metrics.get("loss:sum", float("nan")))
        if opd_future is not None:
            opd_future.result()
            metrics.update(step.opd_loss_fn.last_metrics)
        if optim_future is not None:
            optim_future.result()
        self.step += 1
        batch = step.batch
        metrics.update(
            {
                "batch/sequences": float(batch.batch_size),
                "batch/generated_tokens": float(batch.num_generated_tokens),
                "batch/teacher_positions": float(batch.num_teacher_positions),
                "batch/score_mean": float(batch.scores_B.mean()),
                "tinker/grpo_datums": float(len(step.grpo)),
                "tinker/opd_datums": float(len(step.opd)),
            }
        )
        if self.step % self.config.tinker.save_every_steps == 0:
            self.publish_sampler()
        return metrics

    def publish_sampler(self) -> str:
        """save_weights_for_sampler and hand the path to `on_new_sampler` (the inference side)."""
        name = f"{self.config.tinker.run_name}-step{self.step:06d}"
        path = self.training_client.save_weights_for_sampler(name=name).result().path
        if self.on_new_sampler is not None:
            self.on_new_sampler(path, self.step)
        return path

    def save_state(self) -> str:
        name = f"{self.config.tinker.run_name}-state{self.step:06d}"
        path = self.training_client.save_state(name).result().path
        state_file = Path(self.config.state_path)
        state_file.parent.mkdir(parents=True, exist_ok=True)
        state_file.write_text(json.dumps({"step": self.step, "state_path": path}))
        return path

    def run(self, client: AtroposClient) -> int:
        atropos = self.config.atropos
        client.register(
            Registration(
                wandb_group=atropos.wandb_group,
                wandb_project=atropos.wandb_project,
                batch_size=atropos.batch_size,
                max_token_len=atropos.max_token_len,
                checkpoint_dir=self.config.state_path,
                save_checkpoint_interval=self.config.tinker.state_every_steps,
                starting_step=self.step,
                num_steps=self.config.num_steps,
            )
        )
        every = self.config.tinker.state_every_steps
        while self.step < self.config.num_steps:
            groups = client.wait_for_batch(timeout_s=atropos.poll_timeout_s)
            metrics = self.train_step(groups)
            self.metrics_log.write(self.step, metrics)
            if every and self.step % every == 0:
                self.save_state()
        self.save_state()
        return self.step


def run_tinker(
    config: TinkerTrainerConfig, *, on_new_sampler: Callable[[str, int], None] | None = None
) -> int:
    """Connect to the tinker service (TINKER_API_KEY), resume from `state_path` if it names a
    saved state, and train. Not exercised by the test suite (it needs the service)."""
    import tinker

    service = (
        tinker.ServiceClient(base_url=config.tinker.base_url)
        if config.tinker.base_url
        else tinker.ServiceClient()
    )
    state_file = Path(config.state_path)
    step = 0
    if state_file.is_file():
        saved = json.loads(state_file.read_text())
        training_client = service.create_training_client_from_state_with_optimizer(
            saved["state_path"]
        ).result()
        step = int(saved["step"])
        logger.info("resumed tinker training from %s at step %d", saved["state_path"], step)
    else:
        training_client = service.create_lora_training_client(
            base_model=config.tinker.base_model, rank=config.tinker.lora_rank
        ).result()
    trainer = TinkerOPDTrainer(config, training_client, on_new_sampler=on_new_sampler, step=step)
    atropos = config.atropos
    with AtroposClient(
        atropos.url,
        timeout_s=atropos.request_timeout_s,
        backoff=Backoff(initial_s=atropos.poll_initial_s, maximum_s=atropos.poll_max_s),
    ) as client:
        if step == 0:
            trainer.publish_sampler()  # the inference side needs step-0 weights before rollouts
        return trainer.run(client)
