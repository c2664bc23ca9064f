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
import logging
import os
import socket
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from environments.tasks.code_suite import CODE_KIND, discover_tests
from environments.tasks.file_names import UnsafeFileName, checked_name
from environments.tasks.stdio_suite import STDIO_KIND, cases_from_columns
from environments.tasks.suite_format import is_data_suite
from environments.tasks.task import Task
from hermes_opd.contract.bounded_json import TASK_INPUT, BoundedJSONError, loads_bounded
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


@dataclass(frozen=True)
class Unreadable:
    """A record that could not even be read (reported with the others that do not fit)."""

    reason: str


def _check_field_map(field_map: Mapping[str, str] | None) -> dict[str, str]:
    if field_map is not None and not (
        isinstance(field_map, Mapping)
        and all(isinstance(k, str) and isinstance(v, str) for k, v in field_map.items())
    ):
        raise TaskLoadError(
            f'field_map must be an object of strings (Task field -> column), e.g. {{"hidden_tests": "test"}}; '
            f"got {str(field_map)[:80]}"
        )
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
            return loads_bounded(value, TASK_INPUT)
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
            if isinstance(record, Unreadable):
                raise TaskLoadError(f"{where}: {record.reason}")
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
        record = _read_json(directory / TASK_FILE)
    except FileNotFoundError:
        raise TaskLoadError(f"{directory}: no {TASK_FILE}") from None
    if not isinstance(record, dict):
        raise TaskLoadError(f"{directory / TASK_FILE}: expected a JSON object")
    record.setdefault("task_id", directory.name)
    if (directory / PROMPT_FILE).is_file() and "prompt" not in record:
        record["prompt"] = _read_text(directory / PROMPT_FILE)
    if (directory / TESTS_FILE).is_file() and "hidden_tests" not in record:
        record["hidden_tests"] = _read_json(directory / TESTS_FILE)
    if "reference_solution" not in record:
        names = _as_names(record.get("solution_files", ("solution.py",)))
        found = {n: _read_text(path) for n in names if (path := _inside(directory, n)).is_file()}
        if found:
            record["reference_solution"] = found
    return record


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise TaskLoadError(f"{path}: not valid UTF-8 ({exc.reason} at byte {exc.start})") from None
    except OSError as exc:
        raise TaskLoadError(f"{path}: cannot read ({exc.strerror or exc})") from None


def _read_json(path: Path) -> Any:
    """One JSON file of a task source, within TASK_INPUT; FileNotFoundError when it is missing."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise TaskLoadError(f"{path}: cannot read ({exc.strerror or exc})") from None
    try:
        return loads_bounded(data, TASK_INPUT)
    except BoundedJSONError as exc:
        raise TaskLoadError(f"{path}: invalid JSON ({exc})") from None


def _inside(directory: Path, name: str) -> Path:
    """`directory / name` for a name that follows the rule and resolves inside `directory`."""
    try:
        checked_name(name)
    except UnsafeFileName as exc:
        raise TaskLoadError(f"{directory}: {exc}") from None
    path = directory / name
    if not path.resolve().is_relative_to(directory.resolve()):
        raise TaskLoadError(f"{directory}: {name!r} resolves outside the task directory (a symbolic link)")
    return path


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
        names = _read_json(root / INDEX_FILE)
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise TaskLoadError(f"{root / INDEX_FILE}: expected a list of directory names")
        dirs = [_inside(root, n) for n in names]
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
                if not raw_line.strip():
                    continue
                where = f"{path}:{number}"
                try:
                    yield where, loads_bounded(raw_line, TASK_INPUT)
                except BoundedJSONError as exc:
                    text = str(exc)
                    yield (
                        where,
                        Unreadable(text if text.startswith("not valid UTF-8") else f"invalid JSON ({text})"),
                    )

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
    _check_field_map(field_map)
    source = str(dataset_name_or_path)
    path = Path(source)
    looks_local = source.startswith(("/", "./", "../", "~")) or path.suffix.lower() in {
        *_LOCAL_FORMATS,
        ".gz",
    }
    if looks_local and not path.exists():
        raise TaskLoadError(f"dataset {source!r} does not exist (no such file or directory)")
    hub_note = ""
    if not path.exists() and not _hub_reachable():
        os.environ["HF_HUB_OFFLINE"] = "1"  # read when `datasets` is imported: no retries for minutes
        hub_note = "; the Hugging Face hub is unreachable, so only a dataset in the local cache can load"
    import datasets  # heavy; imported only when used

    if hub_note:
        datasets.config.HF_HUB_OFFLINE = True
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
        first = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ""
        detail = f"{type(exc).__name__}: {first}" if first else type(exc).__name__
        raise TaskLoadError(
            f"could not load dataset {source!r} (split {split!r}): {detail}{hub_note}"
        ) from exc
    where = f"{source}[{split}]"
    rows = ((f"{where} row {i}", row) for i, row in enumerate(loaded))
    return tasks_from_records(rows, field_map, where, test_format)


def _hub_reachable(timeout_s: float = 3.0) -> bool:
    """Can the Hugging Face hub be reached at all (a TCP connection within `timeout_s`)? Skipped
    (True) when offline mode is already set, so that `datasets` answers from its cache."""
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes") or os.environ.get(
        "HF_DATASETS_OFFLINE", ""
    ).lower() in ("1", "true", "yes"):
        return True
    endpoint = urlsplit(os.environ.get("HF_ENDPOINT", "https://huggingface.co"))
    port = endpoint.port or (80 if endpoint.scheme == "http" else 443)
    try:
        socket.create_connection((endpoint.hostname or "huggingface.co", port), timeout=timeout_s).close()
    except OSError:
        return False
    return True


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
