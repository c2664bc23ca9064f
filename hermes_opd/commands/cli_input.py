"""What every operator command (`tasks score`, `validate`, `send`, `process`, `inspect`) shares to meet
bad input with one clear line and exit code 2: an argument parser whose errors are one line, and flag
types that refuse what cannot be meant (0, negative, NaN, infinite), and the flow-control flags
that `send` and `process --send` share (`add_pacing_arguments`, `pacing_error`, `options_from`). Their JSONL reader, which names
every bad line with its number and goes on after it, is `hermes_opd.contract.bounded_json.iter_jsonl`.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import Any, NoReturn

from environments.delivery.group_replay import ReplayOptions
from hermes_opd.runtime.exit_codes import EXIT_USAGE


class OneLineParser(argparse.ArgumentParser):
    """argparse, with a usage error printed as ONE line (no usage block) and exit code 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: {message} (see {self.prog} --help)\n")


def number_in(kind: type, low: float, high: float, *, low_open: bool = False) -> Callable[[str], Any]:
    """An argparse type: a finite `kind` (int or float) in [low, high], or (low, high]."""

    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{text!r} is not {'an integer' if kind is int else 'a number'}"
            ) from None
        if not math.isfinite(value) or value < low or (low_open and value == low) or value > high:
            bracket = "(" if low_open else "["
            raise argparse.ArgumentTypeError(f"must be in {bracket}{low:g}, {high:g}], got {text}")
        return value

    return parse


# -- the flow-control flags of `hermes-opd send` and `hermes-opd process --send` -------------------
def add_pacing_arguments(parser: argparse.ArgumentParser) -> None:
    """The flow-control flags (shared with `hermes-opd process --send`)."""
    parser.add_argument(
        "--max-rate", type=float, default=None, metavar="G", help="at most G groups per second"
    )
    parser.add_argument(
        "--max-queue-batches",
        type=int,
        default=2,
        metavar="N",
        help="post only while the API's queue holds fewer than N trainer batches (default 2; 0: no bound)",
    )


def options_from(args: argparse.Namespace, api_url: str) -> ReplayOptions:
    return ReplayOptions(
        api_url=api_url,
        skip_invalid=getattr(args, "skip_invalid", False),
        max_rate=args.max_rate,
        max_queue_batches=args.max_queue_batches,
        give_up_after_s=getattr(args, "give_up_after", 3600.0),
        drain=not getattr(args, "no_drain", False),
        resend_window=getattr(args, "resend_window", False),
    )


def pacing_error(args: argparse.Namespace) -> str | None:
    if args.max_rate is not None and args.max_rate <= 0:
        return f"--max-rate must be > 0 (got {args.max_rate})"
    if args.max_queue_batches < 0:
        return f"--max-queue-batches must be >= 0 (got {args.max_queue_batches})"
    return None
