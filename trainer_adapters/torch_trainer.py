"""The reference torch trainer: Atropos /batch -> collate -> GRPO + OPD -> AdamW, with checkpoints.

One optimizer step per Atropos batch. The batch is validated and collated once, then split into
micro-batches for gradient accumulation; every loss term is a token mean over the WHOLE step
(the counts are passed down to the losses), so the step's gradient does not depend on the
micro-batch size. Every term and metric is logged on its own (metrics_log.py).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from trainer_adapters.atropos_client import AtroposClient, Backoff, Registration
from trainer_adapters.checkpointing import latest_checkpoint, restore_training_state, save_checkpoint
from trainer_adapters.collate import CollatedBatch, CollateOptions, collate_groups
from trainer_adapters.metrics_log import MetricsLog
from trainer_adapters.model_loading import default_pad_token_id, load_policy, resolve_precision, vocab_rows
from trainer_adapters.objective import compute_objective, opd_entry_ids
from trainer_adapters.policy_lag import policy_lag_metrics, split_stale, stale_metrics
from trainer_adapters.repeated_groups import RepeatedGroupFilter
from trainer_adapters.student_logprobs import (
    StudentLogprobs,
    check_chunked_matches_full,
    compute_student_logprobs,
)
from trainer_adapters.trainer_config import TorchTrainerConfig
from trainer_adapters.weight_sync import WeightSyncError, make_weight_sync

logger = logging.getLogger(__name__)


class TorchTrainer:
    """Owns the model, the optimizer and the step counter. `run()` is the Atropos loop;
    `train_step()` and `evaluate()` work on groups directly (tests, offline use)."""

    def __init__(self, config: TorchTrainerConfig) -> None:
        self.config = config
        torch.manual_seed(config.seed)
        self.precision = resolve_precision(config.model)
        self.checkpoint_root = Path(config.checkpoint.dir)
        resume_from = latest_checkpoint(self.checkpoint_root) if config.checkpoint.resume else None
        self.model = load_policy(
            config.model, self.precision, resume_from / "model" if resume_from is not None else None
        )
        trainable = [p for p in self.model.parameters() if p.requires_grad]
        if not trainable:
            raise ValueError("the model has no trainable parameters")
        optim = config.optim
        self.optimizer = torch.optim.AdamW(
            trainable, lr=optim.lr, betas=optim.betas, eps=optim.eps, weight_decay=optim.weight_decay
        )
        warmup = optim.warmup_steps
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda step: min(1.0, (step + 1) / warmup) if warmup else 1.0
        )
        self.step = 0
        self.skipped_steps = 0
        """Steps that took no optimizer step because the gradient was exactly zero."""
        if resume_from is not None:
            self.step = restore_training_state(resume_from, self.optimizer, self.scheduler)
            logger.info("resumed from %s at step %d", resume_from, self.step)
        self.resumed_from = resume_from
        pad = config.model.pad_token_id
        self.collate_options = CollateOptions(
            pad_token_id=pad if pad is not None else default_pad_token_id(self.model),
            vocab_size=vocab_rows(self.model),
            advantage_eps=config.loss.advantage_eps,
            normalize_advantage_std=config.loss.normalize_advantage_std,
        )
        if optim.logprob_chunk_size is not None:
            check_chunked_matches_full(self.model, vocab_rows(self.model), self.precision.device)
        self.metrics_log = MetricsLog(config.logging.metrics_path, stdout=config.logging.stdout)
        self.weight_sync = make_weight_sync(config.weight_sync)
        self.repeats = RepeatedGroupFilter()
        """Groups already trained on (ids stamped by `hermes-opd send`); repeats are dropped."""
        self.stale_dropped_total = 0
        """Groups dropped as older than `atropos.max_policy_lag`, over the run (trainer_adapters/policy_lag.py)."""

    # --- one batch -------------------------------------------------------------------------

    def collate(self, groups: Sequence[dict[str, Any]]) -> CollatedBatch:
        batch = collate_groups(groups, self.collate_options)
        longest = int(batch.attention_mask_BT.sum(dim=1).max().item()) + 1
        if longest > self.config.atropos.max_token_len:
            raise ValueError(
                f"a sequence has {longest} tokens, more than atropos.max_token_len="
                f"{self.config.atropos.max_token_len}"
            )
        return batch

    def student_logprobs(self, batch: CollatedBatch) -> StudentLogprobs:
        """Student logprobs of the targets (and of the teacher's top-K ids in topk mode), at
        `loss.student_temperature` (1.0 by default, the temperature of vLLM's raw logprobs)."""
        batch = batch.to(self.precision.device)
        with self.precision.autocast():
            return compute_student_logprobs(
                self.model,
                batch.input_ids_BT,
                batch.attention_mask_BT,
                batch.target_ids_BT,
                opd_entry_ids(batch, self.config.loss),
                temperature=self.config.loss.student_temperature,
                chunk_size=self.config.optim.logprob_chunk_size,
            )

    def _accumulate(self, batch: CollatedBatch, *, backward: bool) -> dict[str, float]:
        """Run every micro-batch of `batch`; sum the (already globally normalised) metrics."""
        totals: dict[str, float] = {}
        num_generated = batch.num_generated_tokens
        num_teacher = batch.num_teacher_positions
        for micro in batch.micro_batches(self.config.optim.micro_batch_size):
            micro = micro.to(self.precision.device)
            out = compute_objective(
                self.student_logprobs(micro),
                micro,
                self.config.loss,
                num_generated_tokens=num_generated,
                num_teacher_positions=num_teacher,
                num_prm_positions=batch.num_prm_positions,
            )
            if backward and out.total.requires_grad:
                out.total.backward()
            for key, value in out.metrics.items():
                totals[key] = totals.get(key, 0.0) + float(value)
        totals["batch/sequences"] = float(batch.batch_size)
        totals["batch/generated_tokens"] = float(num_generated)
        totals["batch/teacher_positions"] = float(num_teacher)
        totals["batch/teacher_coverage"] = num_teacher / max(num_generated, 1)
        totals["batch/score_mean"] = float(batch.scores_B.mean())
        return totals

    def accumulate_gradients(self, groups: Sequence[dict[str, Any]]) -> dict[str, float]:
        """Zero the gradients, then forward/backward every micro-batch of `groups`. The result does
        not depend on `optim.micro_batch_size` (token means over the whole batch)."""
        batch = self.collate(groups)
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        return self._accumulate(batch, backward=True)

    def apply_gradients(self) -> dict[str, float]:
        """Clip and take one optimizer step; refuse a non-finite gradient.

        An all-zero gradient (e.g. w_opd = 0 and a batch whose scores are all equal) takes NO
        optimizer step: AdamW would still move the weights along its momentum and weight decay. The
        step counter advances (the batch was consumed), the scheduler does not, and the step is
        counted in `optim/skipped_steps`, as in the tinker adapter."""
        params = [p for group in self.optimizer.param_groups for p in group["params"]]
        lr = self.scheduler.get_last_lr()[0]
        if all(p.grad is None or not bool(p.grad.any()) for p in params):
            self.optimizer.zero_grad(set_to_none=True)
            self.skipped_steps += 1
            self.step += 1
            return {
                "grad_norm": 0.0,
                "lr": lr,
                "optim/step_skipped": 1.0,
                "optim/skipped_steps": float(self.skipped_steps),
            }
        max_norm = self.config.optim.max_grad_norm
        grad_norm = torch.nn.utils.clip_grad_norm_(params, max_norm if max_norm is not None else float("inf"))
        if not torch.isfinite(grad_norm):
            self.optimizer.zero_grad(set_to_none=True)
            raise FloatingPointError(f"non-finite gradient norm {grad_norm.item()} at step {self.step}")
        self.optimizer.step()
        self.scheduler.step()
        self.step += 1
        return {
            "grad_norm": float(grad_norm),
            "lr": lr,
            "optim/step_skipped": 0.0,
            "optim/skipped_steps": float(self.skipped_steps),
        }

    def train_step(self, groups: Sequence[dict[str, Any]]) -> dict[str, float]:
        """One optimizer step on `groups` (one Atropos batch). Returns every loss term and metric."""
        started = time.perf_counter()
        metrics = self.accumulate_gradients(groups)
        metrics.update(self.apply_gradients())
        metrics["step_time_s"] = time.perf_counter() - started
        return metrics

    @torch.no_grad()
    def evaluate(self, groups: Sequence[dict[str, Any]]) -> dict[str, float]:
        """The objective's terms and metrics on `groups` without updating anything."""
        batch = self.collate(groups)
        was_training = self.model.training
        self.model.eval()
        try:
            return self._accumulate(batch, backward=False)
        finally:
            self.model.train(was_training)

    # --- checkpoints and weight sync -------------------------------------------------------

    def save_checkpoint(self) -> Path:
        return save_checkpoint(
            self.checkpoint_root,
            self.step,
            self.model,
            self.optimizer,
            self.scheduler,
            lora=self.config.model.lora.enabled,
            tokenizer_source=self.config.model.path,
            keep_last=self.config.checkpoint.keep_last,
            keep_every=self.config.checkpoint.keep_every,
        )

    def _after_step(self) -> None:
        every = self.config.checkpoint.every_steps
        sync_due = self.weight_sync is not None and self.step % self.config.weight_sync.every_steps == 0
        if not (sync_due or (every and self.step % every == 0)):
            return
        path = self.save_checkpoint()
        if sync_due:
            self._sync(path)

    def _sync(self, path: Path) -> None:
        assert self.weight_sync is not None
        try:
            self.weight_sync(path, self.step)
        except WeightSyncError:
            if self.config.weight_sync.fail_on_error:
                raise
            logger.exception(
                "weight sync failed at step %d; continuing with stale inference weights", self.step
            )

    # --- the Atropos loop ------------------------------------------------------------------

    def registration(self) -> Registration:
        atropos = self.config.atropos
        return Registration(
            wandb_group=atropos.wandb_group,
            wandb_project=atropos.wandb_project,
            batch_size=atropos.batch_size,
            max_token_len=atropos.max_token_len,
            checkpoint_dir=str(self.checkpoint_root),
            save_checkpoint_interval=self.config.checkpoint.every_steps,
            starting_step=self.step,
            num_steps=self.config.num_steps,
        )

    def run(self, client: AtroposClient | None = None) -> int:
        """Register, then train until `num_steps`; checkpoint at the end. Returns the final step."""
        atropos = self.config.atropos
        own_client = client is None
        if client is None:
            client = AtroposClient(
                atropos.url,
                timeout_s=atropos.request_timeout_s,
                backoff=Backoff(initial_s=atropos.poll_initial_s, maximum_s=atropos.poll_max_s),
            )
        try:
            client.register(self.registration())
            stale: list[int] = []  # lags of the groups the bound dropped since the last step
            stale_wait_s = 0.0  # time spent on batches that were dropped whole
            while self.step < self.config.num_steps:
                waited = time.perf_counter()
                groups = self.repeats.new_groups(client.wait_for_batch(timeout_s=atropos.poll_timeout_s))
                groups, dropped = split_stale(groups, self.step, atropos.max_policy_lag)
                stale.extend(dropped)
                batch_wait_s = time.perf_counter() - waited + stale_wait_s
                if dropped:
                    logger.warning(
                        "dropped %d group(s) with policy lag %s > max_policy_lag %d at step %d",
                        len(dropped),
                        sorted(set(dropped)),
                        atropos.max_policy_lag,
                        self.step,
                    )
                if not groups:  # every group was a repeat or too stale: no step, wait for the next batch
                    stale_wait_s = batch_wait_s
                    continue
                lag = policy_lag_metrics(groups, self.step)
                metrics = self.train_step(groups)
                metrics.update(lag)
                self.stale_dropped_total += len(stale)
                metrics.update(stale_metrics(stale, self.stale_dropped_total))
                stale, stale_wait_s = [], 0.0
                metrics["batch/repeated_groups_dropped"] = float(self.repeats.dropped)
                metrics["time/batch_wait_s"] = batch_wait_s
                synced = time.perf_counter()
                try:
                    self._after_step()
                finally:  # the step's metrics are kept even when the sync fails
                    metrics["time/checkpoint_and_sync_s"] = time.perf_counter() - synced
                    self.metrics_log.write(self.step, metrics)
            latest = latest_checkpoint(self.checkpoint_root)
            if latest is None or not latest.name.endswith(f"{self.step:08d}"):
                self.save_checkpoint()
            return self.step
        finally:
            if own_client:
                client.close()
