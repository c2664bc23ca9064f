"""`hermes-opd` console entry point: one registry of subcommands, each in its own module with its
own `main(argv)`; this file only finds the command and dispatches (heavy imports happen inside the
commands). The global flags `--log-level LEVEL` (any case) and `-v`/`--verbose` (debug) go anywhere
on the line (hermes_opd/runtime/cli_flags.py)."""

from __future__ import annotations

import argparse
import importlib
import sys
from dataclasses import dataclass

from hermes_opd.contract.log_setup import configure_logging
from hermes_opd.runtime.cli_flags import LOG_LEVELS, logging_level, pop_global_log_level
from hermes_opd.runtime.exit_codes import EXIT_USAGE


@dataclass(frozen=True)
class Command:
    """One subcommand: the module whose `main(argv)` runs it, and its help line."""

    module: str
    help: str
    own_log_level: bool = False
    """The command sets up its own logging from `--log-level` (its default is quieter): the global
    level, when given, is passed on to it as `--log-level LEVEL`."""


COMMANDS: dict[str, Command] = {
    "demo": Command(
        "hermes_opd.commands.demo",
        "OPD teaching the shipped copying student on a laptop CPU: collect, train a few steps, evaluate "
        "before and after",
        own_log_level=True,
    ),
    "process": Command(
        "hermes_opd.commands.process",
        "collect OPD groups to disk with progress and resume",
        own_log_level=True,
    ),
    "send": Command(
        "hermes_opd.commands.send", "replay a groups JSONL file into an Atropos API (resumable, rate-limited)"
    ),
    "inspect": Command(
        "hermes_opd.commands.inspect", "render a groups JSONL file as a self-contained HTML report"
    ),
    "validate": Command(
        "hermes_opd.commands.validate", "check a groups JSONL file against docs/distill-format.md"
    ),
    "student-eval": Command(
        "hermes_opd.commands.student_eval",
        "measure a student's hint-following on the held-out convention tasks",
    ),
    "proxy": Command(
        "hermes_opd.commands.proxy",
        "serve an OpenAI-compatible proxy in front of a vLLM policy that trains on live sessions",
    ),
    "train": Command(
        "trainer_adapters.train_cli",
        "train from an Atropos API with the trainer the config selects (torch or tinker)",
        own_log_level=True,
    ),
    "tasks": Command(
        "hermes_opd.commands.tasks_score",
        "score a JSONL of solutions against a task source in the real sandbox (tasks score)",
    ),
    "bench": Command("hermes_opd.bench.cli", "run a benchmark (`hermes-opd bench --help` lists them)"),
    "dev-model": Command("hermes_opd.commands.dev_model", "build the tiny local dev model (no downloads)"),
    "dev-server": Command(
        "hermes_opd.commands.dev_server", "serve a local model with vLLM on 127.0.0.1 until Ctrl-C"
    ),
}


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser, for `--help` and usage errors; each command parses its own flags."""
    parser = argparse.ArgumentParser(
        prog="hermes-opd",
        description="Hindsight-guided on-policy distillation.",
        epilog="Global flags, anywhere on the line: --log-level LEVEL, -v (debug). "
        "`hermes-opd COMMAND --help` shows a command's flags.",
    )
    parser.add_argument("--log-level", metavar="LEVEL", help=f"one of {', '.join(LOG_LEVELS)}, any case")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging (--log-level debug)")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, command in COMMANDS.items():
        commands.add_parser(name, help=command.help, add_help=False)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        level, rest = pop_global_log_level(argv)
    except argparse.ArgumentTypeError as exc:
        print(f"hermes-opd: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if not rest or rest[0] not in COMMANDS:
        build_parser().parse_args(rest)  # --help, or a usage error naming the commands
        return EXIT_USAGE
    name, args = rest[0], rest[1:]
    command = COMMANDS[name]
    configure_logging(logging_level(level or "info"))
    if command.own_log_level and level is not None:
        args = ["--log-level", level, *args]
    module = importlib.import_module(command.module)
    return int(module.main(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
