"""Train through the tinker service: the torch trainer's objective through `forward_backward_custom`.

Per Atropos batch (one optimizer step), see tinker_objective.py for the datums and the loss:
1. Trainable step: ONE `forward_backward_custom(datums, loss_fn)` whose `loss_fn` is
   `compute_objective`, the function the torch trainer calls: PPO-clipped GRPO with
   `loss.clip_low`/`loss.clip_high` and the OPD term, both token means over the step. Then ONE
   `optim_step`. With `tinker.server_loss_reduction: per_datum_mean` (skyrl's local server, which
   reduces built-in losses per datum) the same two passes are made here instead, a forward and an
   `importance_sampling` surrogate (`per_datum_mean_surrogate`), so the gradient is still exact. What is logged is what was optimized: every term of that objective, weight 0
   included (`loss/total`, `loss/grpo`, `loss/opd` and their metrics).
2. Nothing to train (no term with a non-zero weight has data, e.g. w_opd = 0 and an equal-score
   batch): no backward pass and no `optim_step`, since Adam would still move the weights along its
   momentum; the terms are still measured (a forward-only pass when there are datums) and the step
   is counted in `optim/skipped_steps`, as the torch trainer does.

Nothing here needs the service to be tested: datums are real `tinker.Datum`s and the loss is a
plain function of (datums, logprobs tensors). The GRPO advantages are never overwritten by OPD
(unlike stock tinker-atropos, see docs/trainers.md) and equal-score groups still train OPD.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from tinker import types as tt

from trainer_adapters.atropos_client import AtroposClient, Backoff, Registration
from trainer_adapters.metrics_log import MetricsLog
from trainer_adapters.repeated_groups import RepeatedGroupFilter
from trainer_adapters.tinker_objective import (
    PER_DATUM_MEAN_LOSS_FN,
    ObjectiveStep,
    build_objective_step,
    per_datum_mean_surrogate,
)
from trainer_adapters.trainer_config import TinkerTrainerConfig

logger = logging.getLogger(__name__)

FORWARD_LOSS_FN = "cross_entropy"
"""The built-in loss of a forward-only pass: it returns the logprobs of `target_tokens` ([T] or
[T, K]), the same pass `forward_backward_custom` makes before running the custom loss."""


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
        self.skipped_steps = 0
        """Steps that took no optimizer step (nothing to train; see the module docstring)."""
        self.metrics_log = MetricsLog(config.logging.metrics_path, stdout=config.logging.stdout)
        self.repeats = RepeatedGroupFilter()
        """Groups already trained on (ids stamped by `hermes-opd send`); repeats are dropped."""

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
        step = build_objective_step(groups, self.config.loss)
        metrics = self._run(step)
        self.step += 1
        batch = step.batch
        metrics.update(
            {
                "batch/sequences": float(batch.batch_size),
                "batch/generated_tokens": float(batch.num_generated_tokens),
                "batch/teacher_positions": float(batch.num_teacher_positions),
                "batch/teacher_coverage": batch.num_teacher_positions / max(batch.num_generated_tokens, 1),
                "batch/score_mean": float(batch.scores_B.mean()),
                "tinker/datums": float(len(step.datums)),
                "optim/step_skipped": 0.0 if step.trainable else 1.0,
                "optim/skipped_steps": float(self.skipped_steps),
            }
        )
        if self.step % self.config.tinker.save_every_steps == 0:
            self.publish_sampler()
        return metrics

    def _run(self, step: ObjectiveStep) -> dict[str, float]:
        """Send the step; returns every term and metric of the objective."""
        if not step.trainable:
            self.skipped_steps += 1
            if not step.datums:
                return step.metrics_without_service()
            forward = self.training_client.forward(step.datums, FORWARD_LOSS_FN)
            return step.metrics_from_forward(forward.result().loss_fn_outputs)
        if self.config.tinker.server_loss_reduction == "per_datum_mean":
            fwd_bwd = self._per_datum_mean_backward(step)
        else:
            fwd_bwd = self.training_client.forward_backward_custom(step.datums, step.loss_fn)
        optim = self.training_client.optim_step(self.adam_params())  # queued before waiting
        result = fwd_bwd.result()
        optim.result()
        if step.loss_fn.last is None:
            raise RuntimeError("forward_backward_custom returned without running the custom loss")
        metrics = {key: float(value) for key, value in step.loss_fn.last.metrics.items()}
        metrics["tinker/loss_sum"] = float(result.metrics.get("loss:sum", float("nan")))
        return metrics

    def _per_datum_mean_backward(self, step: ObjectiveStep) -> Any:
        """What forward_backward_custom does (forward, the objective on its logprobs, a linear
        surrogate's backward), with a surrogate that a per-datum-mean server reduces back to the
        objective's gradient (`per_datum_mean_surrogate`). Returns the backward's future."""
        forward = self.training_client.forward(step.datums, FORWARD_LOSS_FN).result()
        logprobs = [
            out["logprobs"].to_torch().float().detach().requires_grad_(True)
            for out in forward.loss_fn_outputs
        ]
        total, _ = step.loss_fn(step.datums, logprobs)
        total.backward()
        grads = [lp.grad if lp.grad is not None else torch.zeros_like(lp) for lp in logprobs]
        datums = per_datum_mean_surrogate(step.datums, logprobs, grads)
        return self.training_client.forward_backward(datums, PER_DATUM_MEAN_LOSS_FN)

    def publish_sampler(self) -> str:
        """save_weights_for_sampler and hand the path to `on_new_sampler` (the inference side)."""
        name = f"{self.config.tinker.run_name}-step{self.step:06d}"
        path = self.training_client.save_weights_for_sampler(name=name).result().path
        logger.info("step %d: sampler weights: %s", self.step, path)
        if self.on_new_sampler is not None:
            self.on_new_sampler(path, self.step)
        return path

    def save_state(self) -> str:
        name = f"{self.config.tinker.run_name}-state{self.step:06d}"
        path = self.training_client.save_state(name).result().path
        logger.info("step %d: state: %s", self.step, path)
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
            groups = self.repeats.new_groups(client.wait_for_batch(timeout_s=atropos.poll_timeout_s))
            if not groups:  # every group of the batch was a repeat: no step
                continue
            metrics = self.train_step(groups)
            metrics["batch/repeated_groups_dropped"] = float(self.repeats.dropped)
            self.metrics_log.write(self.step, metrics)
            if every and self.step % every == 0:
                self.save_state()
        self.save_state()
        return self.step


def resolved_client(created: Any) -> Any:
    """The TrainingClient a ServiceClient creation call returned: tinker 0.25 returns the client,
    0.38 a future of it (`.result()`; using the future as the client is deprecated there)."""
    result = getattr(created, "result", None)
    return result() if callable(result) else created


def run_tinker(
    config: TinkerTrainerConfig, *, on_new_sampler: Callable[[str, int], None] | None = None
) -> int:
    """Connect to the tinker service (TINKER_API_KEY), resume from `state_path` if it names a
    saved state, and train. Run against a local Tinker-API server by tests/integration/test_tinker_server.py."""
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
        training_client = resolved_client(
            service.create_training_client_from_state_with_optimizer(saved["state_path"])
        )
        step = int(saved["step"])
        logger.info("resumed tinker training from %s at step %d", saved["state_path"], step)
    else:
        training_client = resolved_client(
            service.create_lora_training_client(
                base_model=config.tinker.base_model, rank=config.tinker.lora_rank
            )
        )
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
