"""`hermes-opd bench live`: a miniature of OpenClaw-RL's personalization result on the CPU rig.

A simulated user (hermes_opd/learning_study/live_user.py) asks the copying student, served by vLLM
behind `hermes-opd proxy`, for the convention tasks' functions (train split) and replies as a
person would: a correction that names the team's convention, or an acceptance. The proxy turns each
reply into training signal, `hermes-opd train` learns from it, and the proxy serves each new
adapter (hermes_opd/learning_study/live_loop.py). Arms: OPD only, PRM only (Binary RL) and both,
with the same seeds and the same user turns. Held-out success is the env's `evaluate` on the
held-out convention tasks, without a hint, at fixed numbers of user turns.

Outputs in `--out`: `live.json` (every run: its rounds and replies, trainer steps, proxy metrics,
evaluations), `live.png` (held-out success against user turns, mean and min-max band over seeds),
a summary table, and a last line of one JSON object: `opd_live_gain`, `prm_live_gain`,
`combined_live_gain` (mean end minus start over seeds, for the arms run), `user_turns`.
docs/recipes/live-bench.md says how to run and read it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from hermes_opd.contract.errors import ConfigError
from hermes_opd.learning_study.bench_values import (
    LOOP_CONFIG_KEYS,
    add_loop_arguments,
    apply_convention,
    merged_values,
)
from hermes_opd.learning_study.live_loop import LIVE_ARMS, LiveSettings, run_live_arm
from hermes_opd.learning_study.live_user import Phrasings
from hermes_opd.learning_study.loop import LoopSettings, evaluate_policy, start_lora_vllm
from hermes_opd.learning_study.paths import SHIPPED_STUDENTS, shipped_student_dir, student_model_dir
from hermes_opd.learning_study.plot import plot_learning_curves
from hermes_opd.learning_study.report import mean_band

CONFIG_KEYS = (*LOOP_CONFIG_KEYS, "max_tokens", "phrasings", "judge")
DEFAULTS: dict[str, Any] = {
    "steps": 6,
    "groups_per_step": 2,
    "group_size": 4,
    "eval_every": 2,
    "seeds": 3,
    "first_seed": 0,
    "arms": "opd,prm,combined",
    "lora_r": 8,
    "lr": 1e-3,
    "run_timeout_s": 900.0,
    "max_tokens": 96,
}
QUICK: dict[str, Any] = {"seeds": 1, "arms": "opd"}
"""The README test's run: OPD only, one seed, the same steps and user turns as the full bench."""
ENV_DEFAULTS: dict[str, Any] = {
    "task_source": "conventions",
    "max_turns": 1,
    "max_tokens_per_turn": 96,
    "max_token_length": 2048,
}
"""The held-out evaluation: the env's `evaluate` on the convention tasks, one attempt each."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_loop_arguments(parser, config_keys=CONFIG_KEYS, arms=LIVE_ARMS, defaults=DEFAULTS)
    parser.add_argument(
        "--student-model",
        help=f"the agent's model: a directory, or a shipped student's name ({', '.join(SHIPPED_STUDENTS)}; "
        "default student_q2)",
    )
    parser.add_argument(
        "--phrasings", help="JSON file of the user's reply templates (live_user.py, Phrasings)"
    )
    parser.add_argument("--out", default="runs/bench-live", help="output directory")
    parser.add_argument("--quick", action="store_true", help="OPD only, one seed (the README test's run)")
    parser.add_argument(
        "--report-only",
        action="store_true",
        help="run nothing: rebuild live.json, live.png and the table from the runs in --out "
        "(<arm>-seed<N>/run.json; copy the run directories of several --out here first)",
    )


def resolve(args: argparse.Namespace) -> tuple[dict[str, Any], LiveSettings]:
    """Defaults < (--quick) < --config < flags."""
    values = merged_values(
        args,
        defaults=DEFAULTS,
        quick=QUICK,
        config_keys=CONFIG_KEYS,
        arms=LIVE_ARMS,
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
            "lr",
            "phrasings",
        ),
        sizes=("steps", "groups_per_step", "group_size", "eval_every", "seeds"),
    )
    model_dir = str(student_model_dir(values.get("student_model") or shipped_student_dir()))
    if not Path(model_dir, "config.json").is_file():
        raise ConfigError(f"student model {model_dir} has no config.json")
    values["student_model"] = model_dir
    phrasings = Phrasings.load(values["phrasings"]) if values.get("phrasings") else Phrasings()
    loop = LoopSettings.from_values(values, model_dir, Path(args.out), ENV_DEFAULTS)
    judge = dict(values.get("judge") or {})
    return values, LiveSettings(
        loop=loop, phrasings=phrasings, max_tokens=int(values["max_tokens"]), judge=judge
    )


def _say(text: str) -> None:
    print(f"    ... {text}", file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> int:
    try:
        values, settings = resolve(args)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    loop = settings.loop
    loop.out_dir.mkdir(parents=True, exist_ok=True)
    apply_convention(values)
    started = time.monotonic()
    if args.report_only:
        runs = [json.loads(p.read_text()) for p in loop.out_dir.glob("*-seed*/run.json")]
        runs.sort(key=lambda r: (r["seed"], list(LIVE_ARMS).index(r["arm"])))
        values["arms"] = [arm for arm in LIVE_ARMS if any(r["arm"] == arm for r in runs)]
        return write_outputs(settings, values, runs, started)
    server = None
    if not loop.vllm_root_url:
        print(f"starting a CPU vLLM with LoRA hot-loading for {loop.model_dir} ...", file=sys.stderr)
        server = start_lora_vllm(
            loop.model_dir, loop.lora_r, loop.out_dir / "vllm.log", loop.served_model, on_wait=_say
        )
        loop.vllm_root_url = server.root_url
    runs: list[dict[str, Any]] = []
    try:
        start_eval = evaluate_policy(
            loop, seed=0, prefix=None, metrics_path=loop.out_dir / "start_eval.jsonl"
        )
        print(f"held-out success of the start policy: {start_eval['eval/pass@1']:.3f}", file=sys.stderr)
        first = int(values.get("first_seed") or 0)
        for seed in range(first, first + int(values["seeds"])):
            for arm in values["arms"]:
                print(
                    f"[{time.monotonic() - started:6.0f}s] {arm} seed {seed}: {loop.steps} rounds of "
                    f"{settings.samples_per_step} user turns ...",
                    file=sys.stderr,
                )
                record = run_live_arm(settings, arm, seed, start_eval, _say)
                runs.append(record)
                print(
                    f"    done in {record['wall_s']:.0f}s; held-out success "
                    + " ".join(f"{x}:{y:.2f}" for x, y in record["curve"]),
                    file=sys.stderr,
                )
    finally:
        if server is not None:
            server.stop()
    return write_outputs(settings, values, runs, started)


def live_headline(runs: list[dict[str, Any]], arms: list[str], user_turns: int) -> dict[str, Any]:
    """`<arm>_live_gain` (mean over seeds of end minus start, held-out pass@1) for every arm run, then
    `user_turns` (the user turns every run's last evaluation had learned from)."""
    out: dict[str, Any] = {}
    for arm in arms:
        gains = [r["gain"] for r in runs if r["arm"] == arm]
        out[f"{arm}_live_gain"] = round(statistics.fmean(gains), 4) if gains else None
    out["user_turns"] = user_turns
    return out


def acceptance(run: dict[str, Any], which: int) -> float:
    """The share of a round's replies that accepted (train tasks, sampled at temperature 1)."""
    rounds = run["rounds"]
    return rounds[which]["accepted"] / max(1, rounds[which]["user_turns"])


def summary_table(runs: list[dict[str, Any]]) -> str:
    header = (
        f"{'arm':<9}{'seed':>5}{'start':>7}{'end':>7}{'gain':>7}{'accept_1st':>11}{'accept_last':>12}"
        f"{'turns':>7}{'wall_s':>8}"
    )
    lines = [header, "-" * len(header)]
    for r in runs:
        curve = r["curve"]
        lines.append(
            f"{r['arm']:<9}{r['seed']:>5}{curve[0][1]:>7.3f}{curve[-1][1]:>7.3f}{r['gain']:>+7.3f}"
            f"{acceptance(r, 0):>11.2f}{acceptance(r, -1):>12.2f}{curve[-1][0]:>7}{r['wall_s']:>8.0f}"
        )
    return "\n".join(lines)


def write_outputs(
    settings: LiveSettings, values: dict[str, Any], runs: list[dict[str, Any]], started: float
) -> int:
    loop = settings.loop
    arms = [a for a in values["arms"] if any(r["arm"] == a for r in runs)]
    bands = {arm: mean_band([r["curve"] for r in runs if r["arm"] == arm]) for arm in arms}
    user_turns = min((r["curve"][-1][0] for r in runs), default=0)
    headline = live_headline(runs, arms, user_turns)
    seeds = len({r["seed"] for r in runs})
    figure = plot_learning_curves(
        bands,
        loop.out_dir / "live.png",
        f"live sessions, {Path(loop.model_dir).name}: {loop.steps} steps x "
        f"{settings.samples_per_step} user turns",
        seeds,
        xlabel="user turns (replies the agent learned from)",
    )
    document = {
        "settings": {k: v for k, v in values.items() if k not in ("env", "trainer")}
        | {
            "env": loop.env,
            "trainer": loop.trainer,
            "judge": settings.judge,
            "samples_per_step": settings.samples_per_step,
            "phrasings": {k: list(v) for k, v in vars(settings.phrasings).items()},
        },
        "wall_s": round(time.monotonic() - started, 1),
        "runs": runs,
        "bands": bands,
        "figure": str(figure),
        **headline,
    }
    (loop.out_dir / "live.json").write_text(json.dumps(document, indent=1, default=float) + "\n")
    print(summary_table(runs))
    print(f"wall time {document['wall_s']:.0f}s; figure {figure}; records {loop.out_dir / 'live.json'}")
    print(json.dumps(headline))
    return 0
