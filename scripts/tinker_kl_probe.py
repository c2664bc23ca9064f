"""The OPD term's KL to the teacher over a few steps on ONE fixed batch, with the torch trainer on CPU.

The CPU twin of what the `tinker` suite runs through the local Tinker-API server
(tests/integration/test_tinker_server.py), used to tell an objective's own dynamics from a defect in
the tinker adapter (docs/trainers.md, "Measured through the local server"). It trains a LoRA adapter
on the model with one of two OPD-only objectives, `--steps` Adam (or SGD) steps on the same groups:

  ours        the torch trainer's own `train_step` (token-mode OPD, `opd_token_objective: pg`):
              A_t = teacher lp - CURRENT student lp, detached, so the step's gradient is that of
              1/2 mean (teacher lp - student lp)^2 and every position stops at student = teacher
  ours_per_datum_mean
              `ours` as the local server's JAX backend (skyrl 0.4.0) receives it through the SDK's
              `forward_backward_custom`: the SDK sends weights w_t = -dL/dlp_t for tinker's
              `cross_entropy`, and the server takes each datum's loss as sum_t(-lp_t w_t) /
              max(sum_t w_t, 1e-9), then the mean over datums, instead of the hosted API's
              sum_t(-lp_t w_t) over all datums. A datum whose weights sum to <= 0 is scaled by 1e9
  frozen_is   stock tinker-atropos' objective: tinker's `importance_sampling` loss, -sum r_t A_t
              with r_t = exp(lp - sampler lp), and A_t = teacher lp - SAMPLER lp frozen in the
              batch: on a fixed batch it never stops pushing (r_t grows with every step it takes)

After every step (and before the first) it measures, on the teacher positions of the batch, with
the current weights' logprobs s_t of the batch's tokens and the teacher's logprobs T_t of them
(d_t = s_t - T_t):
  k1     mean d_t                         (what tinker-atropos logs as distil/kl_approx)
  k3     mean exp(-d_t) - 1 + d_t         (the adapter's opd/token_kl_k3; >= 0 per position, 0 only
                                          where s_t = T_t)
  sq     mean d_t^2 / 2                   (the quantity whose gradient `ours` follows)
  is_k1, is_k3  the same, each position weighted by w_t = exp(s_t - sampler lp_t): the estimates of
         KL(student || teacher) at the batch's prefixes under the CURRENT student, from tokens that
         the sampler drew (at step 0, w = 1 up to the trainer/sampler mismatch)

Prints one JSON object per measurement. Example:
  PYTHONPATH=. .venv/bin/python scripts/tinker_kl_probe.py topk.jsonl --model DIR --steps 8 --lr 3e-4
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import torch

from trainer_adapters.torch_trainer import TorchTrainer
from trainer_adapters.trainer_config import parse_trainer_config

SCORE_PATTERN = [1.0, 0.0, 0.0, 0.5]
"""The suite's stand-in scores (tests/integration/test_tinker_server.py); OPD-only runs ignore them."""


def read_groups(path: str, stand_in_scores: bool) -> list[dict]:
    groups = [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
    if stand_in_scores:
        groups = [{**g, "scores": SCORE_PATTERN[: len(g["scores"])]} for g in groups[:-1]] + groups[-1:]
    return groups


def measure(trainer: TorchTrainer, batch) -> dict[str, float]:
    with torch.no_grad():
        trainer.model.eval()
        s = trainer.student_logprobs(batch).token_logprobs_BT.double()
        trainer.model.train()
    mask = batch.teacher_mask_BT
    s = s[mask]
    t = batch.teacher_token_logprobs_BT.double()[mask]
    old = batch.inference_logprobs_BT.double()[mask]
    d = s - t
    k3 = torch.expm1(-d) + d
    w = torch.exp(s - old)
    return {
        "positions": int(mask.sum()),
        "k1": float(d.mean()),
        "k3": float(k3.mean()),
        "sq": float((d * d).mean() / 2),
        "is_k1": float((w * d).mean()),
        "is_k3": float((w * k3).mean()),
        "k3_max": float(k3.max()),
        "w_max": float(w.max()),
    }


def frozen_is_step(trainer: TorchTrainer, batch) -> None:
    """One step of tinker's importance_sampling loss with tinker-atropos' frozen OPD advantage."""
    trainer.optimizer.zero_grad(set_to_none=True)
    mask = batch.teacher_mask_BT
    s = trainer.student_logprobs(batch).token_logprobs_BT
    old = batch.inference_logprobs_BT.to(s)
    advantage = torch.where(mask, batch.teacher_token_logprobs_BT.to(s) - old, torch.zeros_like(s))
    ratio = torch.exp(torch.where(mask, s - old, torch.zeros_like(s)))
    loss = -(ratio * advantage).sum()
    loss.backward()
    trainer.apply_gradients()


def per_datum_mean_step(trainer: TorchTrainer, batch) -> None:
    """One step of `ours` with the local server's per-datum normalization of cross_entropy."""
    trainer.optimizer.zero_grad(set_to_none=True)
    mask = batch.teacher_mask_BT
    s = trainer.student_logprobs(batch).token_logprobs_BT
    advantage = torch.where(mask, batch.teacher_token_logprobs_BT.to(s) - s.detach(), torch.zeros_like(s))
    weights = advantage / max(batch.num_teacher_positions, 1)  # -dL/dlp of ours' token mean
    rows = mask.any(dim=1)
    per_datum = -(s * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1e-9)
    per_datum[rows].mean().backward()
    trainer.apply_gradients()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("groups")
    parser.add_argument("--model", required=True)
    parser.add_argument("--objective", choices=("ours", "ours_per_datum_mean", "frozen_is"), default="ours")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--lr", type=float, default=3e-4)
    parser.add_argument("--optimizer", choices=("adam", "sgd"), default="adam")
    parser.add_argument("--rank", type=int, default=8)
    parser.add_argument("--alpha", type=float, default=32.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--target-modules",
        nargs="+",
        default=None,
        help="LoRA modules (default peft's all-linear; skyrl's server also adapts lm_head and embed_tokens)",
    )
    parser.add_argument(
        "--tinker-atropos-groups",
        action="store_true",
        help="stand-in scores, and drop the equal-score group as tinker-atropos does",
    )
    args = parser.parse_args(argv)
    groups = read_groups(args.groups, stand_in_scores=True)
    if args.tinker_atropos_groups:
        groups = [g for g in groups if len(set(g["scores"])) > 1]
    config = parse_trainer_config(
        {
            "trainer": "torch",
            "seed": args.seed,
            "model": {
                "path": args.model,
                "device": "cpu",
                "dtype": "float32",
                "lora": {
                    "enabled": True,
                    "r": args.rank,
                    "alpha": args.alpha,
                    "target_modules": args.target_modules or "all-linear",
                },
            },
            # tinker's Adam as the adapter sends it (trainer_adapters/tinker_adapter.py): betas
            # (0.9, 0.95), eps 1e-8, no weight decay, no gradient clip.
            "optim": {"lr": args.lr, "betas": [0.9, 0.95], "eps": 1e-8, "max_grad_norm": None},
            "loss": {"opd_mode": "token", "w_grpo": 0.0},
            "logging": {"metrics_path": None, "stdout": False},
        }
    )
    trainer = TorchTrainer(config)
    if args.optimizer == "sgd":
        params = [p for p in trainer.model.parameters() if p.requires_grad]
        trainer.optimizer = torch.optim.SGD(params, lr=args.lr)
        trainer.scheduler = torch.optim.lr_scheduler.LambdaLR(trainer.optimizer, lambda _: 1.0)
    batch = trainer.collate(groups)
    run = {
        "objective": args.objective,
        "lr": args.lr,
        "optimizer": args.optimizer,
        "seed": args.seed,
        "lora": args.target_modules or "all-linear",
    }
    print(json.dumps({**run, "step": 0, **measure(trainer, batch)}), flush=True)
    for step in range(1, args.steps + 1):
        started = time.perf_counter()
        if args.objective == "ours":
            metrics = trainer.train_step(groups)
            assert metrics["optim/step_skipped"] == 0.0
        elif args.objective == "ours_per_datum_mean":
            per_datum_mean_step(trainer, batch)
        else:
            frozen_is_step(trainer, batch)
        row = {**run, "step": step, "step_s": time.perf_counter() - started, **measure(trainer, batch)}
        print(json.dumps(row), flush=True)
        if not math.isfinite(row["k3"]):
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
