"""stdin/stdout hidden tests (APPS, CodeContests, LiveCodeBench-like): the program reads a case's
input text and its stdout is compared, by the trusted verifier, with the expected text. Pure
logic (parsing, normalisation, comparison); no I/O.

A stdio suite is a JSON object::

    {"kind": "stdio", "program": "solution.py", "float_tol": 1e-6,
     "cases": [{"input": "1 2\\n", "output": "3\\n", "public": true},
               {"input": "5 7\\n", "output": "12\\n"}]}

Comparison, after normalising both sides: line endings to `\\n`, trailing whitespace of each
line removed, trailing empty lines removed. With `float_tol`, the texts are compared token by
token (split on whitespace), and two tokens that both parse as numbers may differ by at most
`float_tol` (absolute or relative); otherwise texts must be equal. The expected output never
leaves the trusted process.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from hermes_opd.contract.bounded_json import TASK_INPUT, loads_bounded

STDIO_KIND = "stdio"
_KEYS = {"kind", "program", "float_tol", "cases"}
_CASE_KEYS = {"name", "input", "output", "public"}


@dataclass(frozen=True)
class StdioCase:
    name: str
    input: str
    output: str
    public: bool = False


@dataclass(frozen=True)
class StdioSuite:
    cases: tuple[StdioCase, ...]
    program: str | None = None
    """The file run as `python3 <program>` (default: the task's first solution file)."""
    float_tol: float | None = None

    @property
    def names(self) -> list[str]:
        return [c.name for c in self.cases]

    @property
    def public(self) -> frozenset[str]:
        return frozenset(c.name for c in self.cases if c.public)


def is_stdio_suite(value: Any) -> bool:
    return isinstance(value, Mapping) and value.get("kind") == STDIO_KIND


def parse_stdio_suite(document: Mapping[str, Any]) -> StdioSuite:
    """Validate a stdio suite; ValueError says where and why."""
    unknown = set(document) - _KEYS
    if unknown:
        raise ValueError(f"stdio suite: unknown keys {sorted(unknown)}; known: {sorted(_KEYS)}")
    program = document.get("program")
    if program is not None and (not isinstance(program, str) or not program):
        raise ValueError("stdio suite: program must be a file name")
    tol = document.get("float_tol")
    if tol is not None and (type(tol) not in (int, float) or tol < 0 or not math.isfinite(tol)):
        raise ValueError(f"stdio suite: float_tol must be a non-negative number, got {tol!r}")
    raw_cases = document.get("cases")
    if not isinstance(raw_cases, list) or not raw_cases:
        raise ValueError("stdio suite: cases must be a non-empty list")
    cases = []
    seen: set[str] = set()
    for i, raw in enumerate(raw_cases):
        if not isinstance(raw, Mapping):
            raise ValueError(f"stdio case {i}: must be an object with input and output")
        unknown = set(raw) - _CASE_KEYS
        if unknown:
            raise ValueError(f"stdio case {i}: unknown keys {sorted(unknown)}")
        for key in ("input", "output"):
            if not isinstance(raw.get(key), str):
                raise ValueError(f"stdio case {i}: {key} must be a string, got {type(raw.get(key)).__name__}")
        name = raw.get("name", f"case_{i}")
        if not isinstance(name, str) or not name or name in seen:
            raise ValueError(f"stdio case {i}: name must be a unique non-empty string")
        seen.add(name)
        public = raw.get("public", False)
        if type(public) is not bool:
            raise ValueError(f"stdio case {i}: public must be true or false")
        cases.append(StdioCase(name, raw["input"], raw["output"], public))
    return StdioSuite(tuple(cases), program, float(tol) if tol is not None else None)


def cases_from_columns(value: Any, *, public: bool = False, start: int = 0) -> list[dict[str, Any]]:
    """Stdio cases from the shapes datasets use: a list of {"input", "output"} objects,
    {"inputs": [...], "outputs": [...]} (APPS), {"input": [...], "output": [...]}
    (CodeContests), or the JSON text of any of these. ValueError for anything else."""
    if isinstance(value, str):
        try:
            value = loads_bounded(value, TASK_INPUT)
        except ValueError as exc:
            raise ValueError(f"stdio tests: not JSON ({exc})") from None
    if isinstance(value, Mapping):
        inputs = value.get("inputs", value.get("input"))
        outputs = value.get("outputs", value.get("output"))
        if not isinstance(inputs, list) or not isinstance(outputs, list) or len(inputs) != len(outputs):
            raise ValueError("stdio tests: need equally long lists under inputs/outputs (or input/output)")
        value = [{"input": i, "output": o} for i, o in zip(inputs, outputs, strict=True)]
    if not isinstance(value, list):
        raise ValueError(f"stdio tests: expected a list of cases, got {type(value).__name__}")
    cases = []
    for i, case in enumerate(value):
        if not isinstance(case, Mapping) or not isinstance(case.get("input"), str):
            raise ValueError(f"stdio tests: case {i} needs string input and output")
        if not isinstance(case.get("output"), str):
            raise ValueError(f"stdio tests: case {i} needs string input and output")
        prefix = "public" if public else "case"
        cases.append(
            {
                "name": f"{prefix}_{start + i}",
                "input": case["input"],
                "output": case["output"],
                "public": public,
            }
        )
    return cases


def normalise(text: str) -> list[str]:
    """Lines without line-ending differences, trailing whitespace or trailing empty lines."""
    lines = [line.rstrip() for line in text.replace("\r\n", "\n").replace("\r", "\n").split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def _number(token: str) -> float | None:
    try:
        value = float(token)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def outputs_match(expected: str, actual: str, float_tol: float | None = None) -> bool:
    """Does `actual` stdout match `expected` under the normalisations above?"""
    want, got = normalise(expected), normalise(actual)
    if float_tol is None:
        return want == got
    want_tokens = " ".join(want).split()
    got_tokens = " ".join(got).split()
    if len(want_tokens) != len(got_tokens):
        return False
    for w, g in zip(want_tokens, got_tokens, strict=True):
        if w == g:
            continue
        wn, gn = _number(w), _number(g)
        if wn is None or gn is None:
            return False
        if abs(wn - gn) > float_tol * max(1.0, abs(wn)):
            return False
    return True
