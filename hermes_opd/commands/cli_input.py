"""What every operator command (`tasks score`, `validate`, `send`, `process`, `inspect`) shares to meet
bad input with one clear line and exit code 2: an argument parser whose errors are one line, flag
types that refuse what cannot be meant (0, negative, NaN, infinite), and a JSONL reader that reads
each line within `hermes_opd.contract.bounded_json.OPERATOR_INPUT` (a line too long is skipped
without being held in memory) and names every bad line with its number, going on after it.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NoReturn

from hermes_opd.contract.bounded_json import OPERATOR_INPUT, BoundedJSONError, JSONBounds, loads_bounded

EXIT_USAGE = 2
_SKIP_CHUNK = 1 << 20


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


def iter_jsonl(
    path: str | Path, bounds: JSONBounds = OPERATOR_INPUT
) -> Iterator[tuple[int, Any, str | None]]:
    """(line number, value, None) for each non-blank line that is JSON within `bounds`, and
    (line number, None, why) for each that is not. OSError when the file cannot be opened."""
    with open(path, "rb") as handle:
        number = 0
        while raw := handle.readline(bounds.max_bytes + 1):
            number += 1
            if len(raw) > bounds.max_bytes and not raw.endswith(b"\n"):
                while (rest := handle.readline(_SKIP_CHUNK)) and not rest.endswith(b"\n"):
                    pass
                yield number, None, f"longer than {bounds.max_bytes} bytes; not read"
                continue
            if not raw.strip():
                continue
            try:
                yield number, loads_bounded(raw, bounds), None
            except BoundedJSONError as exc:
                text = str(exc)
                if not text.startswith("not valid UTF-8"):
                    text = f"invalid JSON: {text.removeprefix('not valid JSON: ')}"
                yield number, None, text
