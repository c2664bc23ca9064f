"""Client-side checks against the local Tinker-API server, run by tests/integration/test_tinker_server.py with the
server venv's Python (`.venv-tinker`, the tinker SDK the server pins), so that every tinker call goes
through the SDK exactly as a user's would. Each subcommand prints one JSON object on its last line.

  logprobs GROUPS.jsonl         the trainer's logprobs (a LoRA training client's forward, the pass
                                `forward_backward_custom` makes) and a sampling client's
                                `compute_logprobs`, both on the base weights, against the vLLM sampler
                                logprobs the env recorded (`inference_logprobs`) on generated tokens
  sampler STATE.json GROUPS.jsonl the weights a finished `hermes-opd train` run saved: a training
                                client restored from its last `save_state` and a sampling client made
                                from the sampler weights it saved last, on the same tokens
  atropos ...                   stock tinker-atropos' trainer (see `run_tinker_atropos`)
  train-kl GROUPS.jsonl ...     our trainer, OPD only, on one fixed batch: its KL per step under
                                either `tinker.server_loss_reduction` (see `run_train_kl`)

Environment: TINKER_BASE_URL and TINKER_API_KEY (hermes_opd.devkit.tinker_server.client_environment).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import tinker
from tinker import types as tt

WRAPPER_FIELDS = ("group_index", "task_id")


def read_groups(path: str) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def sequences(groups: list[dict]) -> list[tuple[list[int], list[bool], list[float]]]:
    """(tokens, generated mask, vLLM sampler logprobs) of every sequence."""
    out = []
    for group in groups:
        for tokens, masks, lps in zip(
            group["tokens"], group["masks"], group["inference_logprobs"], strict=True
        ):
            out.append((tokens, [m != -100 for m in masks], lps))
    return out


def forward_logprobs(training_client, seqs) -> list[np.ndarray]:
    """Logprobs of tokens[1:] given tokens[:-1] from the built-in cross_entropy forward pass."""
    datums = [
        tt.Datum(
            model_input=tt.ModelInput.from_ints(tokens[:-1]),
            loss_fn_inputs={
                "target_tokens": tt.TensorData.from_numpy(np.asarray(tokens[1:], dtype=np.int64)),
                "weights": tt.TensorData.from_numpy(np.ones(len(tokens) - 1, dtype=np.float32)),
            },
        )
        for tokens, _, _ in seqs
    ]
    result = training_client.forward(datums, "cross_entropy").result()
    return [out["logprobs"].to_numpy().astype(np.float64) for out in result.loss_fn_outputs]


def sampler_logprobs(sampling_client, seqs) -> tuple[list[np.ndarray], list[int]]:
    """compute_logprobs per sequence, aligned to tokens[1:]. The tinker API returns one value per
    prompt token, None first; the local server returns one value fewer and no None
    (docs/trainers.md), so the alignment follows the length. Also returns the raw lengths."""
    futures = [sampling_client.compute_logprobs(tt.ModelInput.from_ints(tokens)) for tokens, _, _ in seqs]
    aligned, lengths = [], []
    for (tokens, _, _), future in zip(seqs, futures, strict=True):
        values = future.result()
        lengths.append(len(values))
        if len(values) == len(tokens):
            values = values[1:]
        if len(values) != len(tokens) - 1:
            raise ValueError(f"compute_logprobs gave {len(values)} values for {len(tokens)} tokens")
        aligned.append(np.asarray([np.nan if v is None else v for v in values], dtype=np.float64))
    return aligned, lengths


def gaps(seqs, logprobs: list[np.ndarray]) -> np.ndarray:
    """|lp - vLLM lp| on generated tokens."""
    out = []
    for (_, generated, sampler_lps), lp in zip(seqs, logprobs, strict=True):
        mask = np.asarray(generated[1:])
        out.append(np.abs(lp[mask] - np.asarray(sampler_lps[1:], dtype=np.float64)[mask]))
    return np.concatenate(out)


def summary(values: np.ndarray) -> dict:
    return {"tokens": int(values.size), "max_abs": float(values.max()), "mean_abs": float(values.mean())}


def check_logprobs(args) -> dict:
    seqs = sequences(read_groups(args.groups))
    service = tinker.ServiceClient()
    base_model = args.base_model
    started = time.perf_counter()
    training = service.create_lora_training_client(base_model=base_model, rank=args.rank)
    created_s = time.perf_counter() - started
    train_lp = forward_logprobs(training, seqs)
    path = training.save_weights_for_sampler(name="logprob-check").result().path
    sampler = service.create_sampling_client(model_path=path)
    sample_lp, lengths = sampler_logprobs(sampler, seqs)
    return {
        "sequences": len(seqs),
        "training_client_vs_vllm": summary(gaps(seqs, train_lp)),
        "sampling_client_vs_vllm": summary(gaps(seqs, sample_lp)),
        "training_vs_sampling_client_max_abs": float(
            max(np.nanmax(np.abs(a - b)) for a, b in zip(train_lp, sample_lp, strict=True))
        ),
        "prompt_logprob_lengths": lengths,
        "token_counts": [len(tokens) for tokens, _, _ in seqs],
        "create_training_client_s": created_s,
    }


def check_sampler(args) -> dict:
    """A finished run's last state, restored through the SDK, then saved for the sampler and opened
    as a sampling client (the local server serves saved sampler weights only while their training
    model is loaded; docs/trainers.md): both give the same logprobs, and not the base model's."""
    seqs = sequences(read_groups(args.groups))
    state = json.loads(Path(args.state).read_text())
    service = tinker.ServiceClient()
    restored = service.create_training_client_from_state(state["state_path"])
    trained_lp = forward_logprobs(restored, seqs)
    path = restored.save_weights_for_sampler(name="restored").result().path
    sample_lp, _ = sampler_logprobs(restored.create_sampling_client(path), seqs)
    base_lp, _ = sampler_logprobs(service.create_sampling_client(base_model=args.base_model), seqs)
    return {
        "sampler_path": path,
        "restored_vs_sampler_max_abs": float(
            max(np.nanmax(np.abs(a - b)) for a, b in zip(trained_lp, sample_lp, strict=True))
        ),
        "sampler_vs_base_mean_abs": float(
            np.mean([np.nanmean(np.abs(a - b)) for a, b in zip(sample_lp, base_lp, strict=True)])
        ),
    }


def run_tinker_atropos(args) -> dict:
    """Stock tinker-atropos' `TinkerAtroposTrainer`, unmodified, for `--steps` steps against the
    Atropos API at `--api` (which the caller fills with the same batch before each step). After each
    step the OPD term's KL to the teacher on that batch is measured with the trainer's own new
    sampling client: mean over teacher positions of (student lp - teacher lp), the quantity its
    `distil/kl_approx` reports from the batch's sampler logprobs."""
    import asyncio

    from tinker_atropos.config import EnvConfig, TinkerAtroposConfig, TinkerConfig
    from tinker_atropos.trainer import TinkerAtroposTrainer

    groups = read_groups(args.groups)
    teacher = teacher_positions(groups, skip_equal_scores=True)
    config = TinkerAtroposConfig(
        env=EnvConfig(
            tokenizer_name=args.base_model,
            rollout_server_url=args.api,
            batch_size=args.batch_size,
            total_steps=args.steps,
            use_wandb=False,
        ),
        tinker=TinkerConfig(lora_rank=args.rank, learning_rate=args.lr, wandb_group="hermes-opd"),
    )
    trainer = TinkerAtroposTrainer(config)

    async def run() -> list[dict]:
        await trainer.setup()
        rows = [{"step": 0, "kl_to_teacher": kl_to_teacher(trainer.current_sampling_client, teacher)}]
        for step in range(args.steps):
            started = time.perf_counter()
            metrics = await trainer.train_step(step)
            rows.append(
                {
                    "step": step + 1,
                    "step_s": time.perf_counter() - started,
                    "loss": float(metrics["loss"]),
                    "distil_kl_approx": trainer.distil_stats.get("distil/kl_approx"),
                    "distil_tokens": trainer.distil_stats.get("distil/num_tokens"),
                    "kl_to_teacher": kl_to_teacher(trainer.current_sampling_client, teacher),
                }
            )
            print(json.dumps(rows[-1]), flush=True)
        return rows

    rows = asyncio.run(run())
    return {"steps": rows}


def teacher_positions(
    groups: list[dict], *, skip_equal_scores: bool
) -> list[tuple[list[int], list[int], list[float], list[float]]]:
    """(tokens, positions, teacher logprob of the student's token, sampler logprob of it) of every
    sequence with teacher rows. `dense_k1` copies the sampler's logprob outside scored turns: such positions carry no
    teacher signal and are left out (their lp equals the inference lp bit for bit).
    `skip_equal_scores`: leave out the groups stock tinker-atropos skips (all scores equal)."""
    out = []
    for group in groups:
        if skip_equal_scores and len(set(group["scores"])) == 1:
            continue
        for tokens, ids, lps, inference in zip(
            group["tokens"],
            group["distill_token_ids"],
            group["distill_logprobs"],
            group["inference_logprobs"],
            strict=True,
        ):
            positions, teacher, sampler = [], [], []
            for t, (row, row_lps) in enumerate(zip(ids, lps, strict=True)):
                if t == 0 or tokens[t] not in row:
                    continue
                lp = row_lps[row.index(tokens[t])]
                if len(row) == 1 and lp == inference[t]:
                    continue
                positions.append(t)
                teacher.append(lp)
                sampler.append(inference[t])
            if positions:
                out.append((tokens, positions, teacher, sampler))
    return out


def kl_to_teacher(sampling_client, teacher) -> dict:
    """Over the teacher positions, with d = student lp - teacher lp of the sampled token: `k1` = mean
    d (what tinker-atropos logs as `distil/kl_approx`), `k3` = mean(exp(-d) - 1 + d) (>= 0 per token,
    Schulman's estimator of KL(student || teacher) from the student's samples), `gap` = mean |d|,
    `is_k3` = k3 with each position weighted by exp(student lp - sampler lp) (the estimate for the
    current student from the tokens the sampler drew)."""
    seqs = [(tokens, [True] * len(tokens), [0.0] * len(tokens)) for tokens, *_ in teacher]
    student, _ = sampler_logprobs(sampling_client, seqs)
    rows = [
        (student_lp[t - 1], teacher_lp, sampler_lp)
        for (_, positions, teacher_lps, sampler_lps), student_lp in zip(teacher, student, strict=True)
        for t, teacher_lp, sampler_lp in zip(positions, teacher_lps, sampler_lps, strict=True)
    ]
    s, t, q = (np.asarray(column) for column in zip(*rows, strict=True))
    d = s - t
    k3 = np.exp(-d) - 1 + d
    return {
        "k1": float(d.mean()),
        "k3": float(k3.mean()),
        "gap": float(np.abs(d).mean()),
        "is_k3": float(np.mean(np.exp(s - q) * k3)),
        "positions": int(d.size),
    }


def check_kl(args) -> dict:
    """The OPD term's KL to the teacher (see `kl_to_teacher`) under each sampler path, in order."""
    teacher = teacher_positions(read_groups(args.groups), skip_equal_scores=False)
    service = tinker.ServiceClient()
    rows = []
    for path in args.paths:
        rows.append({"path": path, **kl_to_teacher(service.create_sampling_client(model_path=path), teacher)})
    return {"positions": sum(len(p) for _, p, *_ in teacher), "samplers": rows}


def run_train_kl(args) -> dict:
    """Our trainer (TinkerOPDTrainer, OPD only, token mode) for `--steps` steps on the groups of
    GROUPS, all on that one batch, with `--reduction` as `tinker.server_loss_reduction`; the OPD
    term's k3 and mean gap (teacher lp - student lp) are the step's own metrics (the weights after
    step - 1 optimizer steps), and a forward-only pass measures them after the last step."""
    from trainer_adapters.tinker_adapter import TinkerOPDTrainer, resolved_client
    from trainer_adapters.tinker_objective import build_objective_step
    from trainer_adapters.trainer_config import parse_trainer_config

    groups = read_groups(args.groups)
    config = parse_trainer_config(
        {
            "trainer": "tinker",
            "tinker": {
                "base_model": args.base_model,
                "lora_rank": args.rank,
                "learning_rate": args.lr,
                "server_loss_reduction": args.reduction,
                "save_every_steps": args.steps + 1,
            },
            "loss": {"opd_mode": "token", "w_grpo": 0.0},
            "logging": {"metrics_path": None, "stdout": False},
        }
    )
    service = tinker.ServiceClient()
    client = resolved_client(service.create_lora_training_client(base_model=args.base_model, rank=args.rank))
    trainer = TinkerOPDTrainer(config, client)
    rows = []
    for step in range(args.steps):
        started = time.perf_counter()
        metrics = trainer.train_step(groups)
        rows.append(
            {
                "updates": step,
                "k3": metrics["opd/token_kl_k3"],
                "gap": metrics["opd/token_logprob_gap"],
                "step_s": time.perf_counter() - started,
            }
        )
    step = build_objective_step(groups, config.loss)
    metrics = step.metrics_from_forward(client.forward(step.datums, "cross_entropy").result().loss_fn_outputs)
    rows.append(
        {"updates": args.steps, "k3": metrics["opd/token_kl_k3"], "gap": metrics["opd/token_logprob_gap"]}
    )
    return {
        "reduction": args.reduction,
        "lr": args.lr,
        "positions": step.batch.num_teacher_positions,
        "rows": rows,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    logprobs = sub.add_parser("logprobs")
    logprobs.add_argument("groups")
    logprobs.add_argument("--base-model", required=True)
    logprobs.add_argument("--rank", type=int, default=8)
    sampler = sub.add_parser("sampler")
    sampler.add_argument("state")
    sampler.add_argument("groups")
    sampler.add_argument("--base-model", required=True)
    kl = sub.add_parser("kl")
    kl.add_argument("groups")
    kl.add_argument("paths", nargs="+")
    atropos = sub.add_parser("atropos")
    atropos.add_argument("groups")
    atropos.add_argument("--api", required=True)
    atropos.add_argument("--base-model", required=True)
    atropos.add_argument("--steps", type=int, default=3)
    atropos.add_argument("--batch-size", type=int, required=True)
    atropos.add_argument("--rank", type=int, default=8)
    atropos.add_argument("--lr", type=float, default=1e-3)
    train_kl = sub.add_parser("train-kl")
    train_kl.add_argument("groups")
    train_kl.add_argument("--base-model", required=True)
    train_kl.add_argument("--reduction", choices=("sum", "per_datum_mean"), required=True)
    train_kl.add_argument("--steps", type=int, default=8)
    train_kl.add_argument("--lr", type=float, default=3e-4)
    train_kl.add_argument("--rank", type=int, default=8)
    args = parser.parse_args(argv)
    if not os.environ.get("TINKER_API_KEY", "").startswith("tml-"):
        print("error: TINKER_API_KEY must start with tml-", file=sys.stderr)
        return 2
    commands = {
        "logprobs": check_logprobs,
        "sampler": check_sampler,
        "kl": check_kl,
        "atropos": run_tinker_atropos,
        "train-kl": run_train_kl,
    }
    run = commands[args.command]
    print(json.dumps(run(args)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
