"""Load tasks from JSONL files or Hugging Face datasets (a hub name, a `save_to_disk` directory, or a
local json/jsonl/csv/parquet file).

`field_map` maps Task fields to the dataset's column names, e.g.
`{"task_id": "id", "prompt": "question", "hidden_tests": "test_list"}`; unmapped fields use
their own name. Required: task_id, prompt, hidden_tests. Optional: difficulty, reference_solution
(a {filename: content} object, or a string meaning the content of the first solution file),
solution_files (a name or a list). A list of strings for hidden_tests (e.g. assert lines) is joined
with newlines.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from environments.tasks.task import Task
from hermes_opd.contract.errors import HermesOPDError

REQUIRED_FIELDS = ("task_id", "prompt", "hidden_tests")
OPTIONAL_FIELDS = ("difficulty", "reference_solution", "solution_files")
_KNOWN_FIELDS = REQUIRED_FIELDS + OPTIONAL_FIELDS


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
    record: Mapping[str, Any], field_map: Mapping[str, str] | None = None, *, where: str = "record"
) -> Task:
    """Build one Task from a dataset row. `where` names the row in error messages."""
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
            hidden_tests=_as_text(values["hidden_tests"], "hidden_tests", where),
            difficulty=str(values.get("difficulty", "unknown")),
            reference_solution=dict(reference) if reference is not None else None,
            solution_files=solution_files,
        )
    except TaskLoadError:
        raise
    except (TypeError, ValueError) as exc:
        raise TaskLoadError(f"{where}: {exc}") from None


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
    records: Iterable[tuple[str, Mapping[str, Any]]], field_map: Mapping[str, str] | None, source: str
) -> list[Task]:
    """Tasks from (where, record) pairs; rejects empty input and duplicate task ids."""
    tasks: list[Task] = []
    seen: dict[str, str] = {}
    for where, record in records:
        if not isinstance(record, Mapping):
            raise TaskLoadError(f"{where}: expected a JSON object, got {type(record).__name__}")
        task = task_from_record(record, field_map, where=where)
        if task.task_id in seen:
            raise TaskLoadError(
                f"{where}: duplicate task_id {task.task_id!r} (first seen at {seen[task.task_id]})"
            )
        seen[task.task_id] = where
        tasks.append(task)
    if not tasks:
        raise TaskLoadError(f"no tasks found in {source}: the dataset is empty")
    return tasks


def load_jsonl_tasks(path: str | Path, field_map: Mapping[str, str] | None = None) -> list[Task]:
    """One task per non-blank line of a JSONL file."""
    path = Path(path)
    _check_field_map(field_map)
    if not path.is_file():
        raise TaskLoadError(f"task file {str(path)!r} does not exist")

    def records() -> Iterable[tuple[str, Mapping[str, Any]]]:
        with path.open("rb") as f:
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

    return tasks_from_records(records(), field_map, str(path))


_LOCAL_FORMATS = {".json": "json", ".jsonl": "json", ".csv": "csv", ".parquet": "parquet"}


def load_hf_tasks(
    dataset_name_or_path: str | Path, split: str = "train", field_map: Mapping[str, str] | None = None
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
    return tasks_from_records(((f"{where} row {i}", row) for i, row in enumerate(loaded)), field_map, where)
