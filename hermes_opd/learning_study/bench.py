"""`hermes-opd bench learning`: GRPO only, OPD only and both, through the real online loop.

Every arm trains the same student (a LoRA) for the same number of steps, so the same budget of
generations, with the same seeds. The bench writes `learning.json` (per run: per-step loss terms,
grad norms, the ratio-capped fraction, hint rate, equal-score share, lag and stage timings, and
every evaluation), `learning.png` (held-out success against generations, mean and band over seeds)
and prints a summary table; its last line is one JSON object (report.headline).
docs/notes/learning-lab.md, "The bench", says how to run and read it.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path
from typing import Any

from environments.atropos.embedded_paths import default_dev_model_dir
from hermes_opd.contract.errors import ConfigError
from hermes_opd.learning_study.bench_values import (
    LOOP_CONFIG_KEYS,
    add_loop_arguments,
    apply_convention,
    merged_values,
)
from hermes_opd.learning_study.loop import LoopSettings, evaluate_policy, load_run, run_arm, start_lora_vllm
from hermes_opd.learning_study.paths import SHIPPED_STUDENTS, student_model_dir
from hermes_opd.learning_study.plot import plot_learning_curves
from hermes_opd.learning_study.report import (
    ARMS,
    RunRecords,
    convention_summary,
    eval_curve,
    headline,
    mean_band,
    per_step_records,
    probe_summary,
    summary_table,
)

logger = logging.getLogger(__name__)

CONFIG_KEYS = (*LOOP_CONFIG_KEYS, "workers")
"""Keys of a `--config` YAML; command-line flags override them."""

DEFAULTS: dict[str, Any] = {
    "steps": 6,
    "groups_per_step": 1,
    "group_size": 4,
    "eval_every": 2,
    "seeds": 3,
    "first_seed": 0,
    "arms": "grpo,opd,hybrid",
    "workers": 1,
    "lora_r": 8,
    "lr": 1e-3,
    "run_timeout_s": 900.0,
}
QUICK: dict[str, Any] = {
    "steps": 2,
    "groups_per_step": 1,
    "group_size": 4,
    "eval_every": 2,
    "seeds": 1,
    "arms": "opd",
    "run_timeout_s": 600.0,
}
ENV_DEFAULTS: dict[str, Any] = {"max_turns": 3, "max_tokens_per_turn": 96, "max_token_length": 2048}
"""Short rollouts for the CPU rig; a --config `env:` section replaces any of them."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_loop_arguments(parser, config_keys=CONFIG_KEYS, arms=ARMS, defaults=DEFAULTS)
    parser.add_argument(
        "--student-model",
        help=f"student model directory, or a shipped student's name ({', '.join(SHIPPED_STUDENTS)}; "
        "default: the dev model)",
    )
    parser.add_argument("--workers", type=int, help="env serve workers (default 1)")
    parser.add_argument("--out", default="runs/bench-learning", help="output directory")
    parser.add_argument(
        "--quick", action="store_true", help="one OPD-only seed, 2 steps (the test suite's run)"
    )
    parser.add_argument(
        "--report-only",
        action="store_true",
        help="run nothing: rebuild the JSON, figure and table from the finished runs in --out",
    )


def resolve_settings(args: argparse.Namespace) -> tuple[dict[str, Any], LoopSettings]:
    """Defaults < (--quick) < --config < flags. Returns the merged plain values and the settings."""
    values = merged_values(
        args,
        defaults=DEFAULTS,
        quick=QUICK,
        config_keys=CONFIG_KEYS,
        arms=ARMS,
        flags=(
            "student_model",
            "vllm_url",
            "served_model",
            "arms",
            "seeds",
            "first_seed",
            "steps",
            "groups_per_step",
            "group_size",
            "eval_every",
            "workers",
            "lr",
        ),
        sizes=("steps", "groups_per_step", "group_size", "eval_every", "seeds", "workers"),
    )
    if int(values["group_size"]) < 2:
        raise ConfigError("group_size must be >= 2 (GRPO compares rollouts within a group)")
    model_dir = str(student_model_dir(values.get("student_model") or default_dev_model_dir()))
    if not Path(model_dir, "config.json").is_file():
        raise ConfigError(
            f"student model {model_dir} has no config.json (build the dev model or pass --student-model)"
        )
    values["student_model"] = model_dir
    settings = LoopSettings.from_values(values, model_dir, Path(args.out), ENV_DEFAULTS)
    return values, settings


def run(args: argparse.Namespace) -> int:
    try:
        values, settings = resolve_settings(args)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    settings.out_dir.mkdir(parents=True, exist_ok=True)
    apply_convention(values)
    started = time.monotonic()
    server = None
    if not settings.vllm_root_url and not args.report_only:
        print(f"starting a CPU vLLM with LoRA hot-loading for {settings.model_dir} ...", file=sys.stderr)
        server = start_lora_vllm(
            settings.model_dir,
            settings.lora_r,
            settings.out_dir / "vllm.log",
            settings.served_model,
            on_wait=_say,
        )
        settings.vllm_root_url = server.root_url
    runs: list[RunRecords] = []
    if args.report_only:
        runs = [load_run(d) for d in sorted(settings.out_dir.glob("*-seed*")) if (d / "run.json").is_file()]
        runs.sort(key=lambda r: (r.seed, list(ARMS).index(r.arm)))
        values["arms"] = [arm for arm in values["arms"] if any(r.arm == arm for r in runs)]
        values["seeds"] = len({r.seed for r in runs})
        return write_outputs(settings, values, runs, started)
    try:
        start_eval = evaluate_policy(
            settings, seed=0, prefix=None, metrics_path=settings.out_dir / "start_eval.jsonl"
        )
        print(f"held-out success of the start policy: {start_eval['eval/pass@1']:.3f}", file=sys.stderr)
        first = int(values["first_seed"])
        for seed in range(first, first + int(values["seeds"])):
            for arm in values["arms"]:
                run_started = time.monotonic()
                print(
                    f"[{time.monotonic() - started:6.0f}s] {arm} seed {seed}: {settings.steps} steps ...",
                    file=sys.stderr,
                )
                records = run_arm(settings, arm, seed, start_eval, on_wait=_say)
                runs.append(records)
                curve = eval_curve(records)
                print(
                    f"    done in {time.monotonic() - run_started:.0f}s; held-out success "
                    + " ".join(f"{x}:{y:.2f}" for x, y in curve),
                    file=sys.stderr,
                )
    finally:
        if server is not None:
            server.stop()
    return write_outputs(settings, values, runs, started)


def _say(text: str) -> None:
    print(f"    ... {text}", file=sys.stderr, flush=True)


def write_outputs(
    settings: LoopSettings, values: dict[str, Any], runs: list[RunRecords], started: float
) -> int:
    """learning.json, learning.png, the summary table and the headline line."""
    bands = {arm: mean_band([eval_curve(r) for r in runs if r.arm == arm]) for arm in values["arms"]}
    result_headline = {**probe_summary(runs), **convention_summary(runs), **headline(bands)}
    figure = plot_learning_curves(
        bands,
        settings.out_dir / "learning.png",
        f"{Path(settings.model_dir).name}: {settings.steps} steps x "
        f"{settings.generations_per_step} generations",
        int(values["seeds"]),
    )
    document = {
        "settings": {k: v for k, v in values.items() if k not in ("env", "trainer")}
        | {
            "env": settings.env,
            "trainer": settings.trainer,
            "generations_per_step": settings.generations_per_step,
        },
        "wall_s": round(time.monotonic() - started, 1),
        "runs": [
            {
                "arm": r.arm,
                "seed": r.seed,
                "evals": r.evals,
                "curve": eval_curve(r),
                "probe": r.probe,
                "steps": per_step_records(r),
            }
            for r in runs
        ],
        "bands": bands,
        "figure": str(figure),
        **result_headline,
    }
    (settings.out_dir / "learning.json").write_text(json.dumps(document, indent=1, default=float) + "\n")
    print(summary_table(runs))
    print(
        f"wall time {document['wall_s']:.0f}s; figure {figure}; records {settings.out_dir / 'learning.json'}"
    )
    print(json.dumps(result_headline))
    return 0
