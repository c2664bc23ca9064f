"""`hermes-opd` console entry point. Each subcommand lives in its own module; this file only
parses the command line and dispatches (heavy imports happen inside the handlers)."""

from __future__ import annotations

import argparse
import logging
import sys

from hermes_opd.contract.log_setup import configure_logging


def _dev_model(args: argparse.Namespace) -> int:
    from hermes_opd.devkit.dev_model import DevModelSpec, build_dev_model, is_built

    if args.if_missing and is_built(args.dir, architecture=args.architecture):
        print(f"dev model already built at {args.dir}")
        return 0
    build_dev_model(args.dir, DevModelSpec(seed=args.seed), architecture=args.architecture)
    print(f"dev model written to {args.dir}")
    return 0


def _build_student(args: argparse.Namespace) -> int:
    from hermes_opd.commands.student_build import build_student_for_env

    return build_student_for_env(args.dir, seed=args.seed, if_missing=args.if_missing, recipe=args.recipe)


def _dev_server(args: argparse.Namespace) -> int:
    from hermes_opd.devkit.dev_server import DevServer, serve_forever

    server = DevServer(
        model_dir=args.model,
        served_model_name=args.served_model_name,
        port=args.port,
        max_model_len=args.max_model_len,
        max_logprobs=args.max_logprobs,
        log_path=args.log,
        enable_scale_out=not args.no_scale_out,
    )
    return serve_forever(server)


DELEGATED = {
    "demo": (
        "hermes_opd.commands.demo",
        "OPD teaching the shipped copying student on a laptop CPU: collect, train a few steps, evaluate before and after",
    ),
    "process": ("hermes_opd.commands.process_job", "collect OPD groups to disk with progress and resume"),
    "send": (
        "hermes_opd.commands.send_groups",
        "replay a groups JSONL file into an Atropos API (resumable, rate-limited)",
    ),
    "inspect": (
        "hermes_opd.commands.inspector",
        "render a groups JSONL file as a self-contained HTML report",
    ),
    "validate": (
        "hermes_opd.commands.validate_file",
        "check a groups JSONL file against docs/distill-format.md",
    ),
    "student-eval": (
        "hermes_opd.commands.student_eval",
        "measure a student's hint-following on the held-out convention tasks",
    ),
    "proxy": (
        "hermes_opd.commands.proxy",
        "serve an OpenAI-compatible proxy in front of a vLLM policy that trains on live sessions",
    ),
    "train": (
        "trainer_adapters.train_cli",
        "train from an Atropos API with the trainer the config selects (torch or tinker)",
    ),
    "tasks": (
        "hermes_opd.commands.tasks_score",
        "score a JSONL of solutions against a task source in the real sandbox (tasks score)",
    ),
    "bench": (
        "hermes_opd.bench.cli",
        "run a benchmark (`hermes-opd bench --help` lists them)",
    ),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hermes-opd", description="Hindsight-guided on-policy distillation."
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True)

    dev_model = sub.add_parser("dev-model", help="build the tiny local dev model (no downloads)")
    dev_model_sub = dev_model.add_subparsers(dest="action", required=True)
    build = dev_model_sub.add_parser("build", help="write tokenizer, chat template and weights to DIR")
    build.add_argument("dir")
    build.add_argument("--seed", type=int, default=0)
    build.add_argument("--if-missing", action="store_true", help="do nothing when DIR already holds a build")
    build.add_argument(
        "--architecture",
        choices=["qwen2", "qwen3"],
        default="qwen2",
        help="qwen3: the same tokenizer, sizes and fit as a Qwen3, for the local Tinker-API server",
    )
    build.set_defaults(handler=_dev_model)
    student = dev_model_sub.add_parser(
        "build-student",
        help="pretrain the learnable dev student (tool-call format, following a named value) into DIR",
    )
    student.add_argument("dir", nargs="?", default=None, help="default: <cache>/dev-student")
    student.add_argument("--seed", type=int, default=0, help="the conversations recipe's seed")
    student.add_argument(
        "--recipe",
        choices=("conversations", "copy"),
        default="conversations",
        help="conversations (minutes) or copy: induction first, then the mix (about 50 min on one core; "
        "the student of docs/notes/learning-lab.md that learns under OPD)",
    )
    student.add_argument(
        "--if-missing", action="store_true", help="do nothing when DIR already holds a build"
    )
    student.set_defaults(handler=_build_student)

    server = sub.add_parser("dev-server", help="serve a local model with vLLM on 127.0.0.1 until Ctrl-C")
    server.add_argument("--model", required=True, help="model directory (e.g. one built by dev-model build)")
    server.add_argument("--port", type=int, default=0, help="0 picks a free port")
    server.add_argument("--served-model-name", default="dev-model")
    server.add_argument("--max-model-len", type=int, default=4096)
    server.add_argument("--max-logprobs", type=int, default=100)
    server.add_argument("--log", default=None, help="vLLM log file (default: next to the model dir)")
    server.add_argument("--no-scale-out", action="store_true",
                        help="start vLLM without --enable-scale-out (no /inference/v1/generate route)")  # fmt: skip
    server.set_defaults(handler=_dev_server)

    for name, (_module, help_text) in DELEGATED.items():
        sub.add_parser(name, help=help_text, add_help=False)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    verbose = "-v" in argv[:1] or "--verbose" in argv[:1]
    if verbose:
        argv = argv[1:]
    if argv and argv[0] in DELEGATED:
        # Subcommands with their own parser get the rest of the command line untouched.
        import importlib

        configure_logging(logging.DEBUG if verbose else logging.INFO)
        module = importlib.import_module(DELEGATED[argv[0]][0])
        return int(module.main(argv[1:]) or 0)
    args = build_parser().parse_args(argv)
    configure_logging(logging.DEBUG if args.verbose or verbose else logging.INFO)
    return args.handler(args)


if __name__ == "__main__":
    sys.exit(main())
