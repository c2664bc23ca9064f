"""`hermes-opd demo [--out DIR]`: the README's main job, on a laptop CPU, end to end.

By default, the learning demo (demo_learning.py): OPD groups collected with the copying student
that ships with the project, then the real closed loop for a few OPD steps, and held-out success
before and after (docs/recipes/conventions-demo.md).

`hermes-opd demo --dev-model`, the pipeline alone on the 1.3M dev model (it learns nothing; it shows
the data the pipeline writes, in about a minute once set up):

1. builds the tiny dev model (or reuses it: `environments.atropos.embedded_paths.default_dev_model_dir()`),
2. starts a local CPU vLLM on a free port (or uses `--server-url`),
3. collects a few groups with `AgenticOPDEnv`: real sandboxed tools, the hidden-test verifier, the
   rules judge and real teacher scoring (top-50 prompt logprobs),
4. writes DIR/groups.jsonl, DIR/metrics.jsonl and DIR/report.html (the inspector), runs the
   validator over the groups, prints a summary, and stops the server, also on Ctrl-C or an error.

The settings are those of configs/local-cpu.yaml (DEMO_ENV below; tests/unit/test_configs.py keeps the
two equal). DIR is the demo's own: each run starts it afresh.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import time
from pathlib import Path
from typing import Any

from environments.atropos.agentic_opd_env import AgenticOPDEnv
from hermes_opd.commands.progress import format_duration
from hermes_opd.contract.errors import ConfigError
from hermes_opd.contract.log_setup import configure_logging
from hermes_opd.runtime.cli_flags import add_log_level, add_policy_url
from hermes_opd.runtime.exit_codes import EXIT_FAILED, EXIT_OK, EXIT_SIGINT, EXIT_USAGE
from hermes_opd.runtime.stop_signals import sigterm_exits
from hermes_opd.vllm_api.client import root_url

DEFAULT_OUT = "runs/demo"
DEMO_ENV: dict[str, Any] = {
    "group_size": 4,
    "max_turns": 4,
    "max_tokens_per_turn": 256,
    "max_token_length": 2048,
    "temperature": 1.0,
    "seed": 0,
    "judge_backend": "rules",
    "judge_votes": 3,
    "distill_topk": 50,
    "distill_mode": "topk",
    "opd_enabled": True,
    "include_messages": True,
    "use_wandb": False,
}
"""The env settings of the demo; configs/local-cpu.yaml holds the same values."""
DEMO_CONCURRENCY = 2


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hermes-opd demo",
        description="OPD on the shipped copying student and the convention tasks: collect OPD groups, "
        "run the closed loop (vLLM with LoRA hot-loading, run-api, the env, hermes-opd train) for a few "
        "OPD steps, and evaluate the held-out tasks before and after. Writes groups.jsonl, report.html, "
        "learning.png, learning.json and validation.json. With --dev-model: only collect groups with the "
        "1.3M dev model (no training).",
    )
    parser.add_argument(
        "--out", default=DEFAULT_OUT, help=f"output directory, started afresh (default {DEFAULT_OUT})"
    )
    parser.add_argument(
        "--dev-model",
        action="store_true",
        help="collect groups with the 1.3M dev model only (the pipeline's data, no training)",
    )
    parser.add_argument(
        "--groups", type=int, default=None, help="groups to collect (default 2; 3 with --dev-model)"
    )
    learning = parser.add_argument_group("the learning demo (the default)")
    learning.add_argument(
        "--steps",
        type=int,
        default=None,
        help="OPD steps of the closed loop (default: hermes_opd/learning_study/configs/learning-student-quick.yaml, 6)",
    )
    learning.add_argument(
        "--eval-every",
        type=int,
        default=None,
        help="evaluate the weights after every k-th step and the last (default: the config's, 2)",
    )
    learning.add_argument("--seed", type=int, default=0, help="seed of the loop's run (default 0)")
    learning.add_argument(
        "--student-model",
        default=None,
        help="student directory (default: the shipped hermes_opd/learning_study/student_q2)",
    )
    add_policy_url(
        parser,
        "--vllm-url",
        "--server-url",
        help="use this running vLLM (…/v1 or its root URL) instead of starting one; the learning "
        "demo's needs --enable-lora and to serve the student",
    )
    add_log_level(parser, help="debug, info, warning or error, any case (default: warning; -v: debug)")
    dev = parser.add_argument_group("--dev-model")
    dev.add_argument("--group-size", type=int, default=DEMO_ENV["group_size"], help="rollouts per group (4)")
    dev.add_argument(
        "--max-turns", type=int, default=DEMO_ENV["max_turns"], help="assistant turns per rollout"
    )
    dev.add_argument("--concurrency", type=int, default=DEMO_CONCURRENCY, help="groups in flight (default 2)")
    dev.add_argument("--model-dir", default=None, help="dev model directory (default: the cache's dev-model)")
    dev.add_argument("--model-name", default="dev-model", help="served model name (default dev-model)")
    dev.add_argument("--port", type=int, default=0, help="port of the vLLM the demo starts (0: a free one)")
    return parser


def _step(text: str) -> None:
    print(f"==> {text}", flush=True)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from hermes_opd.commands.process import log_level

    configure_logging(log_level(args.log_level), override=True)
    if args.groups is None:
        args.groups = 3 if args.dev_model else 2
    counts = (
        args.groups,
        args.group_size,
        args.concurrency,
        args.max_turns,
        args.steps or 1,
        args.eval_every or 1,
    )
    if min(counts) < 1 or args.seed < 0:
        print(
            "hermes-opd demo: --groups, --group-size, --max-turns, --concurrency, --steps and --eval-every "
            "must be >= 1, --seed >= 0",
            file=sys.stderr,
        )
        return EXIT_USAGE
    # SIGTERM must unwind through the `finally` that stops vLLM (it runs in its own session).
    try:
        with sigterm_exits():
            if args.dev_model:
                return _run(args)
            from hermes_opd.commands import demo_learning

            return demo_learning.run(args)
    except ConfigError as exc:
        print(f"hermes-opd demo: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("\nhermes-opd demo: interrupted", file=sys.stderr)
        return EXIT_SIGINT
    except Exception as exc:  # noqa: BLE001 - one clear line; the server is already stopped
        print(f"hermes-opd demo: failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_FAILED


def _run(args: argparse.Namespace) -> int:
    from environments.atropos.embedded_paths import default_dev_model_dir
    from hermes_opd.devkit.dev_model import build_dev_model, is_built

    started = time.monotonic()
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    model_dir = Path(args.model_dir) if args.model_dir else default_dev_model_dir()
    if is_built(model_dir):
        _step(f"dev model: reusing {model_dir}")
    else:
        _step(f"dev model: building {model_dir} (once: tokenizer + 1.3M-parameter Qwen2, about a minute)")
        build_dev_model(model_dir)
    server = None
    try:
        if args.policy_url:
            base_url = root_url(args.policy_url) + "/v1"
            _step(f"vLLM: using {base_url} (model {args.model_name})")
        else:
            from hermes_opd.devkit.dev_server import DevServer

            server = DevServer(
                str(model_dir),
                served_model_name=args.model_name,
                port=args.port,
                log_path=str(out_dir / "vllm.log"),
            )
            _step(f"vLLM: starting a CPU server for {model_dir} (about a minute; log {server.log_path})")
            t0 = time.monotonic()
            server.start()
            base_url = server.base_url
            _step(f"vLLM: ready at {base_url} in {time.monotonic() - t0:.0f}s (pid {server.process.pid})")
        return _collect_and_report(args, model_dir, base_url, out_dir, started)
    finally:
        if server is not None:
            _step("vLLM: stopping")
            server.stop()


def _collect_and_report(
    args: argparse.Namespace, model_dir: Path, base_url: str, out_dir: Path, started: float
) -> int:
    from environments.atropos.config_loading import build_job_config
    from hermes_opd.commands.process import run_job
    from hermes_opd.commands.validate import validate_jsonl

    groups_path = out_dir / "groups.jsonl"
    metrics_path = out_dir / "metrics.jsonl"
    report_path = out_dir / "report.html"
    env = {
        **DEMO_ENV,
        "group_size": args.group_size,
        "max_turns": args.max_turns,
        "total_steps": args.groups,
        "tokenizer_name": str(model_dir),
        "metrics_path": str(metrics_path),
    }
    server = {
        "base_url": base_url,
        "model_name": args.model_name,
        "tokenizer_name": str(model_dir),
        "api_key": "EMPTY",
        "timeout": 300,
    }
    job = build_job_config({"env": env, "openai": server}, source="demo", env_cls=AgenticOPDEnv)
    _step(f"collecting {args.groups} group(s) of {args.group_size} rollouts ({args.concurrency} at a time)")
    with contextlib.suppress(FileNotFoundError):
        report_path.unlink()
    result, _stop = asyncio.run(
        run_job(job, groups_path, args.groups, concurrency=args.concurrency, fresh=True)
    )
    if result.interrupted:
        print(
            f"hermes-opd demo: stopped by {result.interrupted} after {result.written} group(s)",
            file=sys.stderr,
        )
        return EXIT_SIGINT
    report_ok = False
    if result.written:
        from hermes_opd.commands import inspect as inspector

        _step(f"report: {report_path}")
        with contextlib.redirect_stdout(sys.stderr):
            report_ok = (
                inspector.main([str(groups_path), "--out", str(report_path), "--tokenizer", str(model_dir)])
                == 0
            )
    validation = validate_jsonl(groups_path)
    _print_summary(result, validation, groups_path, metrics_path, report_path if report_ok else None, started)
    ok = result.complete and validation.clean and report_ok
    return EXIT_OK if ok else EXIT_FAILED


def _print_summary(result, validation, groups_path, metrics_path, report_path, started) -> None:
    t = result.totals
    scores = sorted(t.scores)
    verdict = (
        "clean"
        if validation.clean
        else f"{validation.violation_count} violation(s), {validation.invalid_line_count} unreadable line(s)"
    )
    print()
    print(
        f"demo finished in {format_duration(time.monotonic() - started)} "
        f"(collection {format_duration(result.collect_s)}, {result.groups_per_min:.2f} groups/min)"
    )
    print(f"  groups          {result.present}/{result.target} ({len(result.failed)} failed)")
    print(f"  sequences       {t.sequences}")
    if scores:
        print(f"  scores          mean {t.mean_score:.3f}, min {scores[0]:.2f}, max {scores[-1]:.2f}")
    print(
        f"  hint rate       {t.hints}/{t.judged_turns} judged turns ({100 * t.hint_rate:.0f}%), "
        f"{t.scored_turns} turns scored by the teacher"
    )
    print(f"  tokens scored   {t.tokens_scored:,} of {t.tokens_generated:,} generated")
    print(
        f"  validator       {verdict} ({validation.groups} groups, {validation.positions_scored:,} scored positions)"
    )
    print(f"  groups          {groups_path}")
    print(f"  metrics         {metrics_path}")
    print(f"  report          {report_path if report_path else '(not written)'}")
    for index in result.failed[:3]:
        print(f"  group {index} failed: {result.errors.get(index, '?')[:200]}")
    if result.aborted:
        print(f"  stopped early: {result.aborted}")


if __name__ == "__main__":
    raise SystemExit(main())
