"""Load tasks from task directories, JSONL files or Hugging Face datasets (a hub name, a
`save_to_disk` directory, or a local json/jsonl/csv/parquet file). The built-in tasks are task
directories shipped as package data (environments/tasks/data/), read by `load_task_dirs`.

A task directory holds `task.json` (task_id, difficulty, solution_files, ...), `prompt.md`,
`tests.json` (data-style hidden tests, see environments/tasks/suite_format.py) and the reference
solution under its own file name(s) (e.g. `solution.py`). Every source goes through
`task_from_record`.

hidden_tests comes in one of three shapes (environments/tasks/suites.py), chosen by `test_format`:
- `data`: a data-style suite (a JSON object with "tests", or its JSON text);
- `code`: the dataset's own Python test code (a string, or a list of strings such as assert
  lines, joined with newlines), with optional `entry_point` (what `check(candidate)` gets),
  `test_context` (trusted code run before the tests, e.g. HumanEval's prompt) and `public_tests`
  (more test code whose tests are public);
- `stdio`: input/output cases (a list of {"input", "output"}, APPS' {"inputs", "outputs"},
  CodeContests' {"input", "output"} lists, or the JSON text of one), with optional `public_tests`
  in the same shapes;
- `auto` (the default): an object with "kind" or "tests" is taken as it is, other text or a list
  of strings is code, anything else is stdio cases.

`field_map` maps these names to the dataset's column names, e.g.
`{"task_id": "id", "prompt": "question", "hidden_tests": "test_list"}`; unmapped names use
their own. Required: task_id, prompt, hidden_tests. Optional: difficulty, reference_solution
(a {filename: content} object, or a string meaning the content of the first solution file),
solution_files (a name or a list), entry_point, test_context, public_tests. Records that do not
fit are all reported, each with its index, in one TaskLoadError; none is skipped or scored 0.
"""

from __future__ import annotations

import gzip
import json
import logging
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from environments.tasks.code_suite import CODE_KIND, discover_tests
from environments.tasks.stdio_suite import STDIO_KIND, cases_from_columns
from environments.tasks.suite_format import is_data_suite
from environments.tasks.task import Task
from hermes_opd.contract.errors import HermesOPDError

log = logging.getLogger(__name__)

TASK_FILE = "task.json"
PROMPT_FILE = "prompt.md"
TESTS_FILE = "tests.json"
INDEX_FILE = "index.json"

REQUIRED_FIELDS = ("task_id", "prompt", "hidden_tests")
OPTIONAL_FIELDS = (
    "difficulty",
    "reference_solution",
    "solution_files",
    "entry_point",
    "test_context",
    "public_tests",
)
_KNOWN_FIELDS = REQUIRED_FIELDS + OPTIONAL_FIELDS
TEST_FORMATS = ("auto", "data", "code", "stdio")
MAX_REPORTED_ERRORS = 20


class TaskLoadError(HermesOPDError, ValueError):
    """A dataset could not be turned into tasks; the message says where and why."""


def _check_field_map(field_map: Mapping[str, str] | None) -> dict[str, str]:
    explicit = dict(field_map or {})
    unknown = set(explicit) - set(_KNOWN_FIELDS)
    if unknown:
        raise TaskLoadError(
            f"field_map has keys {sorted(unknown)} that are not Task fields; known: {list(_KNOWN_FIELDS)}"
        )
    return explicit


def task_from_record(
    record: Mapping[str, Any],
    field_map: Mapping[str, str] | None = None,
    *,
    where: str = "record",
    test_format: str = "auto",
) -> Task:
    """Build one Task from a dataset row. `where` names the row in error messages."""
    if test_format not in TEST_FORMATS:
        raise TaskLoadError(f"test_format must be one of {list(TEST_FORMATS)}, got {test_format!r}")
    explicit = _check_field_map(field_map)
    columns = {name: explicit.get(name, name) for name in _KNOWN_FIELDS}
    values: dict[str, Any] = {}
    for name in _KNOWN_FIELDS:
        column = columns[name]
        if column in record and record[column] is not None:
            values[name] = record[column]
        elif name in REQUIRED_FIELDS or name in explicit:
            state = "is null" if column in record else "is missing"
            raise TaskLoadError(
                f"{where}: field {column!r} (for Task.{name}) {state}; fields present: {sorted(record)}"
            )
    try:
        solution_files = _as_names(values.get("solution_files", ("solution.py",)))
        reference = values.get("reference_solution")
        if isinstance(reference, str):
            reference = {solution_files[0]: reference}
        elif reference is not None and not (
            isinstance(reference, Mapping) and all(isinstance(v, str) for v in reference.values())
        ):
            raise TaskLoadError(
                f"{where}: reference_solution must be a string or a {{filename: content}} object"
            )
        return Task(
            task_id=str(values["task_id"]),
            prompt=_as_text(values["prompt"], "prompt", where),
            hidden_tests=_as_tests(values, test_format, where),
            difficulty=str(values.get("difficulty", "unknown")),
            reference_solution=dict(reference) if reference is not None else None,
            solution_files=solution_files,
        )
    except TaskLoadError:
        raise
    except (TypeError, ValueError) as exc:
        raise TaskLoadError(f"{where}: {exc}") from None


def _as_tests(values: Mapping[str, Any], test_format: str, where: str) -> str | dict[str, Any]:
    """The record's tests as one suite of the chosen shape."""
    value = values["hidden_tests"]
    if test_format == "auto":
        if (isinstance(value, Mapping) and ("kind" in value or "tests" in value)) or is_data_suite(value):
            test_format = "data"
        elif isinstance(value, str) or (
            isinstance(value, list | tuple) and all(isinstance(v, str) for v in value)
        ):
            test_format = "code"
        else:
            test_format = "stdio"
    if test_format == "data":
        if isinstance(value, Mapping):
            return dict(value)
        if is_data_suite(value):
            return json.loads(value)
        raise TaskLoadError(f"{where}: hidden_tests is not a data-style suite (a JSON object with tests)")
    if test_format == "code":
        code = _as_text(value, "hidden_tests", where)
        suite: dict[str, Any] = {"kind": CODE_KIND, "code": code}
        for name, key in (("entry_point", "entry_point"), ("test_context", "context")):
            if name in values:
                suite[key] = _as_text(values[name], name, where)
        if "public_tests" in values:
            public_code = _as_text(values["public_tests"], "public_tests", where)
            _, public = discover_tests(public_code, suite.get("entry_point"))
            suite["code"] = public_code + "\n" + code
            suite["public"] = [t.name for t in public]
        return suite
    cases = cases_from_columns(value)
    if "public_tests" in values:
        cases = cases_from_columns(values["public_tests"], public=True) + cases
    return {"kind": STDIO_KIND, "cases": cases}


def _as_text(value: Any, name: str, where: str) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list | tuple) and all(isinstance(v, str) for v in value):
        return "\n".join(value)
    raise TaskLoadError(f"{where}: {name} must be a string or a list of strings, got {type(value).__name__}")


def _as_names(value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        return (value,)
    if isinstance(value, list | tuple) and value and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise TaskLoadError(f"solution_files must be a file name or a non-empty list of names, got {value!r}")


def tasks_from_records(
    records: Iterable[tuple[str, Mapping[str, Any]]],
    field_map: Mapping[str, str] | None,
    source: str,
    test_format: str = "auto",
) -> list[Task]:
    """Tasks from (where, record) pairs; rejects empty input and duplicate task ids. Every record
    that does not fit is reported (one line each, up to MAX_REPORTED_ERRORS) in one TaskLoadError."""
    tasks: list[Task] = []
    seen: dict[str, str] = {}
    errors: list[str] = []
    for where, record in records:
        try:
            if not isinstance(record, Mapping):
                raise TaskLoadError(f"{where}: expected a JSON object, got {type(record).__name__}")
            task = task_from_record(record, field_map, where=where, test_format=test_format)
            if task.task_id in seen:
                raise TaskLoadError(
                    f"{where}: duplicate task_id {task.task_id!r} (first seen at {seen[task.task_id]})"
                )
        except TaskLoadError as exc:
            errors.append(str(exc))
            continue
        seen[task.task_id] = where
        tasks.append(task)
    if len(errors) == 1:
        raise TaskLoadError(errors[0])
    if errors:
        shown = "\n".join(f"- {e}" for e in errors[:MAX_REPORTED_ERRORS])
        more = (
            f"\n... and {len(errors) - MAX_REPORTED_ERRORS} more" if len(errors) > MAX_REPORTED_ERRORS else ""
        )
        raise TaskLoadError(f"{len(errors)} record(s) of {source} do not fit:\n{shown}{more}")
    if not tasks:
        raise TaskLoadError(f"no tasks found in {source}: the dataset is empty")
    return tasks


def task_dir_record(directory: str | Path) -> dict[str, Any]:
    """The record of one task directory (task.json, plus prompt.md, tests.json and the reference
    solution files when present), for `task_from_record`."""
    directory = Path(directory)
    try:
        record = json.loads((directory / TASK_FILE).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise TaskLoadError(f"{directory}: no {TASK_FILE}") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise TaskLoadError(f"{directory / TASK_FILE}: invalid JSON ({exc})") from None
    if not isinstance(record, dict):
        raise TaskLoadError(f"{directory / TASK_FILE}: expected a JSON object")
    record.setdefault("task_id", directory.name)
    if (directory / PROMPT_FILE).is_file() and "prompt" not in record:
        record["prompt"] = (directory / PROMPT_FILE).read_text(encoding="utf-8")
    if (directory / TESTS_FILE).is_file() and "hidden_tests" not in record:
        try:
            record["hidden_tests"] = json.loads((directory / TESTS_FILE).read_text(encoding="utf-8"))
        except ValueError as exc:
            raise TaskLoadError(f"{directory / TESTS_FILE}: invalid JSON ({exc})") from None
    if "reference_solution" not in record:
        names = _as_names(record.get("solution_files", ("solution.py",)))
        found = {n: (directory / n).read_text(encoding="utf-8") for n in names if (directory / n).is_file()}
        if found:
            record["reference_solution"] = found
    return record


def load_task_dirs(
    root: str | Path, field_map: Mapping[str, str] | None = None, test_format: str = "auto"
) -> list[Task]:
    """One task per subdirectory of `root` that has a task.json; in the order of `root/index.json`
    (a list of directory names) when there is one, else sorted by name."""
    root = Path(root)
    _check_field_map(field_map)
    if not root.is_dir():
        raise TaskLoadError(f"task directory {str(root)!r} does not exist")
    if (root / INDEX_FILE).is_file():
        names = json.loads((root / INDEX_FILE).read_text(encoding="utf-8"))
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise TaskLoadError(f"{root / INDEX_FILE}: expected a list of directory names")
        dirs = [root / n for n in names]
    else:
        dirs = sorted(p for p in root.iterdir() if (p / TASK_FILE).is_file())
    return tasks_from_records(((str(d), task_dir_record(d)) for d in dirs), field_map, str(root), test_format)


def load_jsonl_tasks(
    path: str | Path, field_map: Mapping[str, str] | None = None, test_format: str = "auto"
) -> list[Task]:
    """One task per non-blank line of a JSONL file (gzip-compressed when its name ends in .gz)."""
    path = Path(path)
    _check_field_map(field_map)
    if not path.is_file():
        raise TaskLoadError(f"task file {str(path)!r} does not exist")

    def records() -> Iterable[tuple[str, Mapping[str, Any]]]:
        with gzip.open(path, "rb") if path.suffix == ".gz" else path.open("rb") as f:
            for number, raw_line in enumerate(f, start=1):
                try:
                    line = raw_line.decode("utf-8")
                except UnicodeDecodeError as exc:
                    raise TaskLoadError(
                        f"{path}:{number}: not valid UTF-8 ({exc.reason} at byte {exc.start})"
                    ) from None
                if not line.strip():
                    continue
                where = f"{path}:{number}"
                try:
                    yield where, json.loads(line)
                except json.JSONDecodeError as exc:
                    raise TaskLoadError(f"{where}: invalid JSON ({exc})") from None

    return tasks_from_records(records(), field_map, str(path), test_format)


_LOCAL_FORMATS = {".json": "json", ".jsonl": "json", ".csv": "csv", ".parquet": "parquet"}


def load_hf_tasks(
    dataset_name_or_path: str | Path,
    split: str = "train",
    field_map: Mapping[str, str] | None = None,
    test_format: str = "auto",
) -> list[Task]:
    """Tasks from a Hugging Face dataset: a directory written by `save_to_disk` (a Dataset or a
    DatasetDict), a local json/jsonl/csv/parquet file, or else a hub dataset name."""
    import datasets  # heavy; imported only when used

    _check_field_map(field_map)
    source = str(dataset_name_or_path)
    path = Path(source)
    try:
        if path.is_dir() and any(
            (path / marker).exists() for marker in ("dataset_info.json", "dataset_dict.json", "state.json")
        ):
            loaded = datasets.load_from_disk(source)
            if isinstance(loaded, datasets.DatasetDict):
                if split not in loaded:
                    raise TaskLoadError(f"{source}: no split {split!r}; available splits: {sorted(loaded)}")
                loaded = loaded[split]
        elif path.is_file():
            builder = _LOCAL_FORMATS.get(path.suffix.lower())
            if builder is None:
                raise TaskLoadError(
                    f"{source}: unsupported file type {path.suffix!r}; use one of {sorted(_LOCAL_FORMATS)}"
                )
            loaded = datasets.load_dataset(builder, data_files={split: source}, split=split)
        else:
            loaded = datasets.load_dataset(source, split=split)
    except TaskLoadError:
        raise
    except Exception as exc:  # `datasets` raises many types (even StopIteration for an empty file)
        detail = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        raise TaskLoadError(f"could not load dataset {source!r} (split {split!r}): {detail}") from exc
    where = f"{source}[{split}]"
    rows = ((f"{where} row {i}", row) for i, row in enumerate(loaded))
    return tasks_from_records(rows, field_map, where, test_format)


TASK_SOURCES = ("jsonl", "hf", "dirs")


def load_tasks(
    source: str,
    path: str | Path,
    *,
    split: str = "train",
    field_map: Mapping[str, str] | None = None,
    test_format: str = "auto",
) -> list[Task]:
    """Tasks from one of TASK_SOURCES (the env's `task_source`, `task_path`, ... keys)."""
    if source == "jsonl":
        return load_jsonl_tasks(path, field_map, test_format)
    if source == "hf":
        return load_hf_tasks(path, split, field_map, test_format)
    if source == "dirs":
        return load_task_dirs(path, field_map, test_format)
    raise TaskLoadError(f"unknown task source {source!r}; known: builtin, {', '.join(TASK_SOURCES)}")
