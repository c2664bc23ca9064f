"""What every operator command (`tasks score`, `validate`, `send`, `process`, `inspect`) shares to meet
bad input with one clear line and exit code 2: an argument parser whose errors are one line, and flag
types that refuse what cannot be meant (0, negative, NaN, infinite). Their JSONL reader, which names
every bad line with its number and goes on after it, is `hermes_opd.contract.bounded_json.iter_jsonl`.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import Any, NoReturn

EXIT_USAGE = 2


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
