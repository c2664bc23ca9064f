"""The one JSON reader for text the project did not write: a sandbox's replies and reports, and
every file or flag an operator passes to a command. Bounded in raw size, element count, nesting
depth and number length BEFORE anything is decoded, so that the decode itself costs at most a
known amount of time and memory.

The pre-scan works on the raw bytes at C speed, in chunks (numpy: the real quotes are found, the
brackets and commas outside strings are counted, and the depth is a running sum over those
brackets): an over-large or over-complex document is refused without building a single Python
object, and a thread running the scan never holds the interpreter for long. What passes is parsed by `json.loads` without NaN/Infinity and, unless told
otherwise, without duplicate keys (and, for the bounds that say so, with 64-bit integers and
finite floats only). Every refusal is one `BoundedJSONError` (a ValueError) whose
message says what was too large.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from hermes_opd.contract.errors import HermesOPDError

_CHUNK = 1 << 18
"""Bytes scanned per step: each numpy call is short, so a thread running the scan lets others run."""
_SKIP_CHUNK = 1 << 20
"""Bytes read per step while skipping the rest of a line that is too long."""


class BoundedJSONError(HermesOPDError, ValueError):
    """A JSON document that is not valid, or exceeds its bounds; the message says which."""


@dataclass(frozen=True)
class JSONBounds:
    """What one document may hold. `max_elements` counts every value (each array member and object
    entry, and the containers themselves), `max_depth` the nesting of arrays and objects."""

    max_bytes: int
    max_depth: int
    max_elements: int
    max_number_chars: int | None = None
    """The longest number literal, and with it every float finite and every integer within
    +-(2**63 - 1) (a Python call per number); None leaves Python's own limit of 4300 digits."""
    unique_keys: bool = True
    allow_constants: bool = False
    """Read NaN, Infinity and -Infinity (as Python's json writes them) instead of refusing them."""


OPERATOR_INPUT = JSONBounds(
    max_bytes=256 * 1024 * 1024, max_depth=64, max_elements=20_000_000, max_number_chars=32
)
"""One line of a file an operator passes to a command (`tasks score`, `validate`, `send`, ...),
or a JSON flag: deep enough for every format the project reads, far below Python's recursion
limit, with 64-bit integers and finite floats."""
GROUPS_INPUT = JSONBounds(
    max_bytes=256 * 1024 * 1024,
    max_depth=64,
    max_elements=128 * 1024 * 1024,
    unique_keys=False,
    allow_constants=True,
)
"""One line of a groups JSONL file (`validate`, `send`, `inspect`): as large as a group may be, and
NaN/Infinity read, so that the contract's validator names them (violation kind non_finite)."""
TASK_INPUT = JSONBounds(max_bytes=256 * 1024 * 1024, max_depth=256, max_elements=20_000_000)
"""A task source's record (task.json, tests.json, a JSONL line): a hidden test's expected value
may nest as deep as the value codec allows (200) and hold any integer Python reads."""
INT64_MAX = 2**63 - 1


def _reject_constant(name: str) -> Any:
    raise BoundedJSONError(f"non-standard JSON constant {name}")


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise BoundedJSONError(f"duplicate key {key[:80]!r}")
        out[key] = value
    return out


@dataclass
class _Scan:
    """What the pre-scan counts outside strings, carried from one chunk to the next. Only sparse
    positions (quotes, brackets, commas) are ever gathered, so a chunk costs a few passes."""

    in_string: int = 0
    backslashes: int = 0
    """The run of backslashes that ends the bytes scanned so far."""
    elements: int = 1
    level: int = 0
    depth: int = 0

    def _real_quotes(self, chunk: np.ndarray) -> np.ndarray:
        """Positions of the quotes that open or close a string: those after an even run of backslashes."""
        quotes = np.flatnonzero(chunk == 0x22)
        if quotes.size == 0:
            return quotes
        escaped_maybe = chunk[np.maximum(quotes - 1, 0)] == 0x5C
        escaped_maybe[quotes == 0] = self.backslashes > 0
        if not escaped_maybe.any():
            return quotes
        index = np.arange(chunk.size)
        last_plain = np.where(chunk == 0x5C, -1, index)
        np.maximum.accumulate(last_plain, out=last_plain)
        before = quotes - 1
        plain_before = last_plain[np.maximum(before, 0)]
        run = np.where(before >= 0, before - plain_before, 0)
        run += np.where((before < 0) | (plain_before < 0), self.backslashes, 0)
        return quotes[run % 2 == 0]

    def feed(self, chunk: np.ndarray) -> None:
        real = self._real_quotes(chunk)
        marks = np.flatnonzero(
            (chunk == 0x2C) | (chunk == 0x5B) | (chunk == 0x5D) | (chunk == 0x7B) | (chunk == 0x7D)
        )
        outside = ((np.searchsorted(real, marks) + self.in_string) & 1) == 0
        kinds = chunk[marks[outside]]
        opening = (kinds == 0x5B) | (kinds == 0x7B)
        self.elements += int(np.count_nonzero(kinds == 0x2C)) + int(np.count_nonzero(opening))
        if kinds.size:
            step = opening.astype(np.int32)
            step -= ((kinds == 0x5D) | (kinds == 0x7D)).astype(np.int32)
            running = np.cumsum(step)
            self.depth = max(self.depth, self.level + int(running.max()))
            self.level += int(running[-1])
        self.in_string = (self.in_string + real.size) & 1
        plain = np.flatnonzero(chunk != 0x5C)
        if plain.size == 0:
            self.backslashes += chunk.size
        else:
            self.backslashes = chunk.size - 1 - int(plain[-1])


def check_bounds(raw: bytes, bounds: JSONBounds) -> None:
    """Refuse `raw` (a JSON document's bytes) when it exceeds `bounds`; builds no Python value.
    Counts are taken outside strings, exactly for valid JSON (and for the valid prefix of invalid
    JSON, the part a parser would read before it fails)."""
    if len(raw) > bounds.max_bytes:
        raise BoundedJSONError(f"{len(raw)} bytes; at most {bounds.max_bytes} are read")
    scan = _Scan()
    for start in range(0, len(raw), _CHUNK):
        count = min(_CHUNK, len(raw) - start)
        scan.feed(np.frombuffer(raw, dtype=np.uint8, count=count, offset=start))
        if scan.elements > bounds.max_elements:
            raise BoundedJSONError(f"more than {bounds.max_elements} values")
        if scan.depth > bounds.max_depth:
            raise BoundedJSONError(f"nested more than {bounds.max_depth} levels deep")


def _number_hooks(max_chars: int) -> dict[str, Any]:
    def parse_int(text: str) -> int:
        if len(text) > max_chars or abs(value := int(text)) > INT64_MAX:
            raise BoundedJSONError(
                f"the integer {text[:24]}{'...' if len(text) > 24 else ''} is out of range"
            )
        return value

    def parse_float(text: str) -> float:
        value = float(text) if len(text) <= max_chars else math.inf
        if math.isinf(value):
            raise BoundedJSONError(f"the number {text[:24]}{'...' if len(text) > 24 else ''} is out of range")
        return value

    return {"parse_int": parse_int, "parse_float": parse_float}


def loads_bounded(raw: bytes | str, bounds: JSONBounds) -> Any:
    """Parse one JSON document within `bounds`; BoundedJSONError says why it was refused."""
    if isinstance(raw, str):
        text, raw = raw, raw.encode("utf-8", errors="surrogatepass")
        check_bounds(raw, bounds)
    else:
        check_bounds(raw, bounds)
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise BoundedJSONError(f"not valid UTF-8 ({exc.reason} at byte {exc.start})") from None
    try:
        return json.loads(
            text,
            parse_constant=None if bounds.allow_constants else _reject_constant,
            **(_number_hooks(bounds.max_number_chars) if bounds.max_number_chars else {}),
            object_pairs_hook=_no_duplicates if bounds.unique_keys else None,
        )
    except BoundedJSONError:
        raise
    except (ValueError, RecursionError) as exc:
        raise BoundedJSONError(f"not valid JSON: {str(exc)[:200]}") from None


def iter_jsonl(
    path: str | Path, bounds: JSONBounds = OPERATOR_INPUT
) -> Iterator[tuple[int, Any, str | None]]:
    """(line number, value, None) for each non-blank line of a JSONL file that is JSON within
    `bounds`, and (line number, None, why) for each that is not; the lines after a bad one are still
    read, and a line too long is skipped without being held in memory. OSError when the file cannot
    be opened."""
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
