"""`hermes-opd validate FILE.jsonl`: check a file of ScoredDataGroups against the distill contract.

Each non-blank line is one JSON object: a ScoredDataGroup, or a wrapper `{"group": {...}, ...}`, read
by the groups file's one reader (environments/delivery/groups_file.py), within
`hermes_opd.contract.bounded_json.GROUPS_INPUT` (256 MiB, nesting 64 deep); a group of more than
MAX_GROUP_SEQUENCES sequences is one violation, found before any of its sequences is checked.

Exit codes: 0 clean; 1 contract violations (the first ones are listed); 2 the file cannot be read,
a line is not a JSON object (each such line is named, and the lines after it are still
validated), or the file holds no group at all (empty, or only blank lines: there is nothing a
trainer could read, so an empty file is unusable input, not a clean one). Blank lines are skipped.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from environments.delivery.groups_file import iter_groups
from hermes_opd.commands.cli_input import OneLineParser
from hermes_opd.contract.constants import MAX_GROUP_SEQUENCES
from hermes_opd.contract.provenance import parse_provenance, scored_positions
from hermes_opd.contract.validation import Violation, validate_group

FIRST_VIOLATIONS = 20
FIRST_INVALID_LINES = 20


@dataclass(frozen=True)
class InvalidLine:
    line: int
    """1-based line number."""
    message: str


@dataclass
class ValidationReport:
    """What `validate_jsonl` found in one file."""

    path: str
    groups: int = 0
    sequences: int = 0
    positions: int = 0
    positions_scored: int = 0
    """Positions carrying teacher data (see `hermes_opd.contract.provenance.scored_positions`)."""
    turns_scored: int = 0
    """Turns whose provenance status is `scored`."""
    violations_by_kind: dict[str, int] = field(default_factory=dict)
    first_violations: list[Violation] = field(default_factory=list)
    invalid_lines: list[InvalidLine] = field(default_factory=list)
    """The first unreadable lines (at most 20); `invalid_line_count` counts them all."""
    invalid_line_count: int = 0
    read_error: str | None = None

    @property
    def violation_count(self) -> int:
        return sum(self.violations_by_kind.values())

    @property
    def empty(self) -> bool:
        """Not a single non-blank line: nothing to validate, which is unusable input (exit 2)."""
        return self.read_error is None and self.groups == 0 and self.invalid_line_count == 0

    @property
    def clean(self) -> bool:
        return (
            self.read_error is None
            and not self.empty
            and self.invalid_line_count == 0
            and self.violation_count == 0
        )

    @property
    def exit_code(self) -> int:
        if self.read_error is not None or self.invalid_line_count or self.empty:
            return 2
        return 1 if self.violation_count else 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "clean": self.clean,
            "groups": self.groups,
            "sequences": self.sequences,
            "positions": self.positions,
            "positions_scored": self.positions_scored,
            "turns_scored": self.turns_scored,
            "violations": self.violation_count,
            "violations_by_kind": dict(sorted(self.violations_by_kind.items())),
            "first_violations": [v.to_dict() for v in self.first_violations],
            "invalid_line_count": self.invalid_line_count,
            "invalid_lines": [{"line": i.line, "message": i.message} for i in self.invalid_lines],
            "read_error": self.read_error,
            "empty": self.empty,
        }


def _count_group(report: ValidationReport, group: dict[str, Any]) -> None:
    tokens = group.get("tokens")
    if not isinstance(tokens, list) or len(tokens) > MAX_GROUP_SEQUENCES:
        return
    report.sequences += len(tokens)
    overrides = group.get("overrides") if isinstance(group.get("overrides"), list) else []
    for seq, seq_tokens in enumerate(tokens):
        if not isinstance(seq_tokens, list):
            continue
        report.positions += len(seq_tokens)
        opd = overrides[seq].get("opd") if seq < len(overrides) and isinstance(overrides[seq], dict) else None
        provenance = parse_provenance(opd)
        report.turns_scored += len(provenance.scored_turns)
        # A malformed sequence counts no scored positions; validate_group reports what is wrong.
        with contextlib.suppress(TypeError, ValueError, IndexError, KeyError):
            report.positions_scored += int(np.count_nonzero(scored_positions(group, seq)))


def validate_jsonl(path: str | Path) -> ValidationReport:
    """Validate every group of a JSONL file, streaming line by line."""
    report = ValidationReport(path=str(path))
    by_kind: Counter[str] = Counter()
    try:
        for line_number, group, error in iter_groups(path):
            if group is None:
                report.invalid_line_count += 1
                if len(report.invalid_lines) < FIRST_INVALID_LINES:
                    report.invalid_lines.append(InvalidLine(line_number, error or "unreadable"))
                continue
            violations = validate_group(group, group_index=report.groups)
            report.groups += 1
            _count_group(report, group)
            for violation in violations:
                by_kind[violation.kind] += 1
                if len(report.first_violations) < FIRST_VIOLATIONS:
                    report.first_violations.append(_with_line(violation, line_number))
    except OSError as exc:
        report.read_error = f"{type(exc).__name__}: {exc}"
    report.violations_by_kind = dict(by_kind)
    return report


def _with_line(violation: Violation, line: int) -> Violation:
    return Violation(violation.kind, violation.group, violation.seq, violation.pos, violation.message, line)


def _format_violation(v: Violation) -> str:
    where = f"line {v.line} group {v.group}"
    if v.seq is not None:
        where += f" seq {v.seq}"
    if v.pos is not None:
        where += f" pos {v.pos}"
    return f"{where}: [{v.kind}] {v.message}"


def main(argv: list[str] | None = None) -> int:
    """`hermes-opd validate FILE.jsonl`: JSON summary on stdout, human lines on stderr."""
    parser = OneLineParser(
        prog="hermes-opd validate",
        description="Check a JSONL file of ScoredDataGroups against distill format v1.",
    )
    parser.add_argument("file", help="JSONL file: one ScoredDataGroup (or {'group': ...}) per line")
    args = parser.parse_args(argv)
    report = validate_jsonl(args.file)
    print(json.dumps(report.to_dict(), indent=2))
    if report.read_error is not None:
        print(f"cannot read {args.file}: {report.read_error}", file=sys.stderr)
    elif report.empty:
        print(f"{args.file}: no groups: the file is empty (or holds only blank lines)", file=sys.stderr)
    for invalid in report.invalid_lines:
        print(f"line {invalid.line}: {invalid.message}", file=sys.stderr)
    if report.violation_count:
        print(
            f"{report.violation_count} violation(s); first {len(report.first_violations)}:", file=sys.stderr
        )
        for violation in report.first_violations:
            print("  " + _format_violation(violation), file=sys.stderr)
    return report.exit_code


if __name__ == "__main__":
    raise SystemExit(main())
