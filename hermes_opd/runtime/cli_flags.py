"""The flags every command spells the same way (docs/cli.md, "One spelling per concept"):
`--atropos-url`, `--policy-url`, `--log-level` (case-insensitive; `-v` is `--log-level debug`) and
`--api-key`/`--api-key-file`. A command adds one with the helper below and names the spellings it
used before; an old spelling keeps working for one release and prints a one-line deprecation
notice on stderr when it is used.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

LOG_LEVELS = ("debug", "info", "warning", "error")


class _Spellings(argparse.Action):
    """Stores the value, and names the new spelling on stderr when an old one was typed."""

    def __init__(self, option_strings: list[str], dest: str, old: Sequence[str] = (), **kwargs: Any):
        self.old = frozenset(old)
        super().__init__(option_strings, dest, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None) -> None:  # noqa: ANN001 - argparse's
        if option_string in self.old:
            deprecation_notice(parser.prog, option_string, self.option_strings[0])
        setattr(namespace, self.dest, values)


def deprecation_notice(prog: str, old: str, new: str) -> None:
    """The one-line notice of an old spelling, on stderr."""
    print(f"{prog}: {old} is deprecated and goes in the next release; use {new}", file=sys.stderr)


def add_atropos_url(
    parser: argparse.ArgumentParser,
    *old: str,
    required: bool = False,
    help: str = "the Atropos API, e.g. http://127.0.0.1:8000",
) -> None:
    """`--atropos-url URL` (dest `atropos_url`); `old`: the spellings this command used before."""
    parser.add_argument(
        "--atropos-url",
        *old,
        dest="atropos_url",
        action=_Spellings,
        old=old,
        required=required,
        metavar="URL",
        help=help,
    )


def add_policy_url(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup,
    *old: str,
    default: str | None = None,
    help: str = "the policy's vLLM server (…/v1)",
    dest: str = "policy_url",
) -> None:
    """`--policy-url URL` (dest `policy_url` unless told); `old`: the spellings this command used before."""
    parser.add_argument(
        "--policy-url", *old, dest=dest, action=_Spellings, old=old, default=default, metavar="URL", help=help
    )


def add_api_key(parser: argparse.ArgumentParser, env_var: str, what: str) -> None:
    """`--api-key KEY` and `--api-key-file PATH` (dests `api_key`, `api_key_file`), beside `env_var`."""
    keys = parser.add_mutually_exclusive_group()
    keys.add_argument(
        "--api-key",
        action="append",
        default=None,
        metavar="KEY",
        help=f"{what} (repeatable; also ${env_var}, comma-separated)",
    )
    keys.add_argument("--api-key-file", metavar="PATH", help=f"{what}, one per line (# comments)")


def api_keys_from(args: argparse.Namespace) -> list[str] | None:
    """The keys `--api-key`/`--api-key-file` give; None when neither was used."""
    if args.api_key:
        return [k.strip() for key in args.api_key for k in key.split(",") if k.strip()]
    if args.api_key_file:
        lines = Path(args.api_key_file).read_text(encoding="utf-8").splitlines()
        return [line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")]
    return None


def log_level_name(text: str) -> str:
    """An argparse type: a log level name in any case, as lower case."""
    name = text.strip().lower()
    if name not in LOG_LEVELS:
        raise argparse.ArgumentTypeError(f"log level must be one of {', '.join(LOG_LEVELS)}, got {text!r}")
    return name


def add_log_level(
    parser: argparse.ArgumentParser, default: str | None = None, help: str | None = None
) -> None:
    """`--log-level LEVEL` (any case) and `-v`/`--verbose` (= debug), dest `log_level`."""
    parser.add_argument(
        "--log-level",
        type=log_level_name,
        default=default,
        metavar="LEVEL",
        help=help or f"one of {', '.join(LOG_LEVELS)}, any case",
    )
    parser.add_argument(
        "-v",
        "--verbose",
        dest="log_level",
        action="store_const",
        const="debug",
        help="debug logging (--log-level debug)",
    )


def pop_global_log_level(argv: list[str]) -> tuple[str | None, list[str]]:
    """`--log-level LEVEL` (or `=LEVEL`), `-v` and `--verbose` taken from ANYWHERE in `argv` (up to a
    `--`), as the level they ask for (the last wins; None: not asked) and the rest of the line.
    Raises argparse.ArgumentTypeError for a level that is not one."""
    level: str | None = None
    rest: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            rest.extend(argv[i:])
            break
        if arg in ("-v", "--verbose"):
            level = "debug"
        elif arg == "--log-level":
            if i + 1 >= len(argv):
                raise argparse.ArgumentTypeError("--log-level needs a level")
            level = log_level_name(argv[i + 1])
            i += 1
        elif arg.startswith("--log-level="):
            level = log_level_name(arg.partition("=")[2])
        else:
            rest.append(arg)
        i += 1
    return level, rest


def logging_level(name: str) -> int:
    """The `logging` constant of a level name."""
    return int(getattr(logging, name.upper()))
