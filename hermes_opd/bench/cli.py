"""`hermes-opd bench <pipeline|payload|loss|teacher|teacher-scaling|sandbox|hint-selection|student-topk|send|learning|reply-flood|proxy>
[--json] [--quick] [--repeat N]`.

Every benchmark prints a short human summary and, with `--json`, one JSON object on its LAST line.
The object's last key is the headline ratio (larger is better, except the cost ratios of
hint-selection and student-topk). `--repeat N` runs the benchmark N times and reports the element-wise median (each run is also kept under `runs` when `--keep-runs`).
`--quick` shrinks every size so that the benchmark finishes in seconds (tests use it).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import signal
import sys
import threading
from typing import Any

from environments.atropos.embedded_paths import default_dev_model_dir
from hermes_opd.bench.common import median_result, rounded, with_headline

BENCHES = (
    "pipeline",
    "payload",
    "loss",
    "teacher",
    "teacher-scaling",
    "sandbox",
    "hint-selection",
    "student-topk",
    "send",
    "learning",
    "reply-flood",
    "proxy",
)


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print one JSON object on the last line")
    parser.add_argument("--quick", action="store_true", help="tiny sizes (seconds; for tests)")
    parser.add_argument("--repeat", type=int, default=1, help="run N times and report medians")
    parser.add_argument("--keep-runs", action="store_true", help="with --repeat: include every run")
    parser.add_argument("--out", default=None, help="also write the JSON object to this file")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hermes-opd bench", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="bench", required=True)

    p = sub.add_parser("pipeline", help="reference OPD schedule vs ours (remote-like and real teacher)")
    _common(p)
    p.add_argument("--backend", choices=["remote", "real", "both"], default="both")
    p.add_argument("--rollouts", type=int, default=None, help="default 8 (quick: 2)")
    p.add_argument("--turns", type=int, default=None, help="turn pairs per rollout; default 4 (quick: 2)")
    p.add_argument("--prompt-tokens", type=int, default=None, help="default 256 (quick: 64)")
    p.add_argument("--turn-tokens", type=int, default=None, help="default 48 (quick: 24)")
    p.add_argument("--state-tokens", type=int, default=None, help="default 96 (quick: 32)")
    p.add_argument("--gen-time", type=float, default=None, help="seconds until the last rollout finishes; "
                   "default 10 (quick: 0.5)")  # fmt: skip
    p.add_argument("--judge-latency", type=float, default=0.3)
    p.add_argument("--teacher-latency", type=float, default=0.15, help="remote-like teacher latency")
    p.add_argument("--judge-concurrency", type=int, default=None, help="default: OPDConfig's")
    p.add_argument("--teacher-concurrency", type=int, default=None, help="default: TeacherConfig's")
    p.add_argument("--k", type=int, default=50)
    _server_args(p)

    p = sub.add_parser("payload", help="distill-field bytes: ours vs dense zero-padded vs dense_k1")
    _common(p)
    p.add_argument(
        "--groups", default=None, help="groups JSONL (or a JSON group); default: collect real groups"
    )
    p.add_argument(
        "--collect", type=int, default=None, help="groups to collect from the dev server (default 2)"
    )
    p.add_argument("--group-size", type=int, default=None, help="rollouts per collected group (default 4)")
    _server_args(p)

    p = sub.add_parser("loss", help="top-K reverse-KL forward+backward: memory and time vs K-clones and CE")
    _common(p)
    p.add_argument("--T", type=int, default=None, help="positions (default 1024; quick 128)")
    p.add_argument("--V", type=int, default=None, help="vocabulary (default 32000; quick 4000)")
    p.add_argument("--K", type=int, default=None, help="teacher top-K (default 50; quick 8)")
    p.add_argument("--iters", type=int, default=None, help="timed iterations per variant (default 3)")

    p = sub.add_parser("sandbox", help="sandbox command overhead: shell-built root vs bubblewrap (root only)")
    _common(p)
    p.add_argument("--commands", type=int, default=None, help="commands per builder (default 100; quick 10)")

    p = sub.add_parser(
        "reply-flood", help="code-suite replies built to be costly to decode, beside honest neighbours (root)"
    )
    _common(p)
    p.add_argument("--shapes", default=None, help="comma-separated payloads (default dicts,zeros,set,tuples; "
                   "quick dicts)")  # fmt: skip
    p.add_argument("--attackers", default="1,2", help="comma-separated attacker counts (default 1,2)")
    p.add_argument("--humaneval", type=int, default=None, help="HumanEval neighbours (default 4; quick 2)")
    p.add_argument("--stdio", type=int, default=None, help="stdio neighbours (default 2; quick 1)")

    p = sub.add_parser(
        "learning",
        help="GRPO only / OPD only / both through the real online loop (docs/notes/learning-lab.md)",
    )
    from hermes_opd.learning_study.bench import add_arguments

    add_arguments(p)

    p = sub.add_parser("teacher", help="teacher scoring latency and bytes, split into server/transfer/parse")
    _common(p)
    p.add_argument("--lengths", default=None, help="comma-separated context lengths (default 256,1024,2048)")
    p.add_argument("--ks", default=None, help="comma-separated K values (default 1,20,50)")
    p.add_argument("--turn-tokens", type=int, default=64, help="positions the teacher needs (the turn)")
    p.add_argument("--iters", type=int, default=None, help="requests per cell (default 3)")
    _server_args(p)

    p = sub.add_parser("teacher-scaling", help="one teacher request on every path against context length, "
                       "vs a plain prefill")  # fmt: skip
    _common(p)
    p.add_argument(
        "--lengths", default=None, help="comma-separated context lengths (default 256,1024,2048,3584)"
    )
    p.add_argument(
        "--turn-tokens", type=int, default=64, help="the turn's positions (the rows a teacher needs)"
    )
    p.add_argument("--k", type=int, default=50)
    p.add_argument("--iters", type=int, default=None, help="requests per path and length (default 3)")
    p.add_argument("--paths", default="completions,generate,transformers", help="comma-separated paths")
    p.add_argument("--local-threads", type=int, default=None, help="torch threads of the in-process path")
    _server_args(p)

    p = sub.add_parser("hint-selection", help="cost of scoring m candidate hints vs one, per teacher path")
    _common(p)
    p.add_argument(
        "--context-tokens", type=int, default=None, help="context before the hint (default 2048; quick 256)"
    )
    p.add_argument(
        "--turn-tokens", type=int, default=None, help="the turn's positions (default 64; quick 16)"
    )
    p.add_argument("--tail-tokens", type=int, default=32, help="ids between the hint and the turn")
    p.add_argument("--m", type=int, default=3, help="candidate hints")
    p.add_argument("--k", type=int, default=50)
    p.add_argument("--iters", type=int, default=None, help="turns per path (default 5; quick 1)")
    p.add_argument("--paths", default="transformers,completions,generate", help="comma-separated paths")
    p.add_argument("--local-threads", type=int, default=None, help="torch threads of the in-process path")
    _server_args(p)

    p = sub.add_parser("student-topk", help="generation with the sampler's own top-K (logprobs=K) vs without")
    _common(p)
    p.add_argument("--k", type=int, default=4, help="the student's top-K (OpenClaw-RL's default 4)")
    p.add_argument("--n", type=int, default=None, help="continuations per request (default 8; quick 2)")
    p.add_argument(
        "--max-tokens", type=int, default=None, help="tokens per continuation (default 128; quick 16)"
    )
    p.add_argument("--prompt-tokens", type=int, default=None, help="default 512 (quick 64)")
    p.add_argument("--iters", type=int, default=None, help="request pairs (default 6; quick 2)")
    p.add_argument("--teacher-k", type=int, default=50, help="the teacher's top-K for the unknown-id count")
    _server_args(p)

    p = sub.add_parser("send", help="hermes-opd send: groups/s, and the API's memory with and without pacing")
    _common(p)
    p.add_argument("--groups", required=True, help="groups JSONL to replay (cycled up to ten batches)")
    p.add_argument("--batch-size", type=int, default=None, help="trainer batch in sequences (default 8)")
    p.add_argument("--step-s", type=float, default=None,
                   help="the slow trainer's seconds per batch (default: 4x slower than send's throughput)")  # fmt: skip
    p = sub.add_parser(
        "proxy", help="hermes-opd proxy: p50/p95 per request against direct vLLM, 1 and 16 sessions"
    )
    _common(p)
    p.add_argument("--turns", type=int, default=None, help="requests per session (default 3; quick 2)")
    p.add_argument("--max-tokens", type=int, default=None, help="per request (default 32; quick 8)")
    p.add_argument("--rounds", type=int, default=None, help="alternating rounds (default 3; quick 1)")
    p.add_argument("--sessions", default="1,16", help="concurrencies, comma-separated (default 1,16)")
    _server_args(p)
    return parser


def _server_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--base-url", default="http://127.0.0.1:8123/v1", help="dev vLLM server")
    parser.add_argument("--model", default="dev-model", help="served model name")
    parser.add_argument(
        "--tokenizer",
        default=str(default_dev_model_dir()),
        help="tokenizer / model directory (the dev model)",
    )


def _pick(value: Any, default: Any, quick_default: Any, quick: bool) -> Any:
    if value is not None:
        return value
    return quick_default if quick else default


def run_once(args: argparse.Namespace) -> dict[str, Any]:
    q = args.quick
    if args.bench == "pipeline":
        from environments.pipeline.opd_config import OPDConfig, TeacherConfig
        from hermes_opd.bench.pipeline_bench import BACKENDS, PipelineBenchConfig
        from hermes_opd.bench.synth import SynthSpec

        spec = SynthSpec(
            rollouts=_pick(args.rollouts, 8, 2, q),
            turns=_pick(args.turns, 4, 2, q),
            prompt_tokens=_pick(args.prompt_tokens, 256, 64, q),
            turn_tokens=_pick(args.turn_tokens, 48, 24, q),
            state_tokens=_pick(args.state_tokens, 96, 32, q),
        )
        cfg = PipelineBenchConfig(
            spec=spec,
            backends=BACKENDS if args.backend == "both" else (args.backend,),
            tokenizer_dir=args.tokenizer,
            real_base_url=args.base_url,
            real_model=args.model,
            judge_latency_s=args.judge_latency,
            teacher_latency_s=args.teacher_latency,
            gen_time_s=_pick(args.gen_time, 10.0, 0.5, q),
            k=args.k,
            judge_concurrency=_pick(args.judge_concurrency, OPDConfig().judge_concurrency, None, False),
            teacher_concurrency=_pick(args.teacher_concurrency, TeacherConfig().concurrency, None, False),
        )
        from hermes_opd.bench import pipeline_bench

        return asyncio.run(pipeline_bench.run(cfg))
    if args.bench == "payload":
        from hermes_opd.bench import payload_bench

        return payload_bench.run(
            groups_path=args.groups,
            collect=_pick(args.collect, 2, 1, q),
            group_size=_pick(args.group_size, 4, 2, q),
            base_url=args.base_url,
            model=args.model,
            tokenizer_dir=args.tokenizer,
            quick=q,
        )
    if args.bench == "loss":
        from hermes_opd.bench import loss_bench

        return loss_bench.run(
            T=_pick(args.T, 1024, 128, q),
            V=_pick(args.V, 32000, 4000, q),
            K=_pick(args.K, 50, 8, q),
            iters=_pick(args.iters, 3, 1, q),
        )
    if args.bench == "teacher":
        from hermes_opd.bench import teacher_bench

        lengths = [int(x) for x in (args.lengths or ("64,128" if q else "256,1024,2048")).split(",")]
        ks = [int(x) for x in (args.ks or ("1,5" if q else "1,20,50")).split(",")]
        return asyncio.run(
            teacher_bench.run(
                base_url=args.base_url,
                model=args.model,
                tokenizer_dir=args.tokenizer,
                lengths=lengths,
                ks=ks,
                turn_tokens=min(args.turn_tokens, min(lengths) // 2),
                iters=_pick(args.iters, 3, 1, q),
            )
        )
    if args.bench == "teacher-scaling":
        from hermes_opd.bench import teacher_scaling

        lengths = [int(x) for x in (args.lengths or ("128,256" if q else "256,1024,2048,3584")).split(",")]
        return asyncio.run(
            teacher_scaling.run(
                base_url=args.base_url,
                model=args.model,
                tokenizer_dir=args.tokenizer,
                lengths=lengths,
                turn_tokens=min(args.turn_tokens, min(lengths) // 2),
                k=args.k,
                iters=_pick(args.iters, 3, 1, q),
                paths=tuple(p for p in args.paths.split(",") if p),
                local_threads=args.local_threads,
            )
        )
    if args.bench == "sandbox":
        from hermes_opd.bench import sandbox_bench

        return sandbox_bench.run_sync(_pick(args.commands, 100, 10, q))
    if args.bench == "hint-selection":
        from hermes_opd.bench import hint_selection_bench

        return asyncio.run(
            hint_selection_bench.run(
                base_url=args.base_url,
                model=args.model,
                tokenizer_dir=args.tokenizer,
                context_tokens=_pick(args.context_tokens, 2048, 256, q),
                turn_tokens=_pick(args.turn_tokens, 64, 16, q),
                tail_tokens=args.tail_tokens,
                m=args.m,
                k=args.k,
                iters=_pick(args.iters, 5, 1, q),
                paths=tuple(p for p in args.paths.split(",") if p),
                local_threads=args.local_threads,
            )
        )
    if args.bench == "student-topk":
        from hermes_opd.bench import student_topk_bench

        return asyncio.run(
            student_topk_bench.run(
                base_url=args.base_url,
                model=args.model,
                tokenizer_dir=args.tokenizer,
                k=args.k,
                n=_pick(args.n, 8, 2, q),
                max_tokens=_pick(args.max_tokens, 128, 16, q),
                prompt_tokens=_pick(args.prompt_tokens, 512, 64, q),
                iters=_pick(args.iters, 6, 2, q),
                teacher_k=args.teacher_k,
            )
        )
    if args.bench == "reply-flood":
        from hermes_opd.bench import reply_flood_bench

        return reply_flood_bench.run_sync(
            _pick(args.shapes, "dicts,zeros,set,tuples", "dicts", q).split(","),
            [int(n) for n in args.attackers.split(",")],
            humaneval=_pick(args.humaneval, 4, 2, q),
            stdio=_pick(args.stdio, 2, 1, q),
        )
    if args.bench == "send":
        from hermes_opd.bench import send_bench

        return send_bench.run(args.groups, batch_size=_pick(args.batch_size, 8, 4, q), step_s=args.step_s)
    if args.bench == "proxy":
        from hermes_opd.bench import proxy_bench

        return asyncio.run(
            proxy_bench.run(
                base_url=args.base_url,
                model=args.model,
                tokenizer_dir=args.tokenizer,
                concurrency=tuple(int(s) for s in args.sessions.split(",") if s),
                turns=_pick(args.turns, 3, 2, q),
                max_tokens=_pick(args.max_tokens, 32, 8, q),
                rounds=_pick(args.rounds, 3, 1, q),
            )
        )
    raise ValueError(f"unknown benchmark {args.bench!r}")


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
    args = build_parser().parse_args(argv)
    # SIGTERM unwinds like Ctrl-C, so child processes (fake endpoints) are stopped on the way out.
    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        return _main(args)
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _main(args: argparse.Namespace) -> int:
    if args.bench == "learning":  # its own outputs: JSON file, PNG, table, headline line
        from hermes_opd.learning_study.bench import run

        logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        return run(args)
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
