"""Which convention an attempt at a convention task followed (pure logic; the tasks: conventions.py).

Success on a convention task needs two things: the open convention right (the name, or the module)
and the function right. Success rates alone do not say which convention a student learned, so
every attempt is also classified by what it wrote for the open convention:

- a `module` task: the first of the four candidate files (`helpers.py`, `utils.py`, ...) that a
  `write_file` call wrote;
- a `name` task: the first of the four candidate names (`compute_<noun>`, `get_<noun>`, ...) that a
  written file defines (`def <name>(`).

The attempt `followed` the convention when that choice is the task's convention value (`helpers.py`,
`compute_<noun>` as shipped, or the values of a task of another convention: the value the hints
reveal). `chosen` is the candidate's convention part (the
module file, or the name's verb: `compute`, `get`, ...), `other` when files were written but no
candidate, and `none` when nothing was written. Only `write_file` calls count: a file written
through the terminal is not seen (the copying student writes with `write_file`).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from functools import cache
from typing import Any

from environments.tasks.conventions import KINDS, Convention, ConventionTask, generate

NOTHING_WRITTEN = "none"
NO_CANDIDATE = "other"
_DEFINED = re.compile(r"^[ \t]*def[ \t]+([A-Za-z_]\w*)[ \t]*\(", re.MULTILINE)


@dataclass(frozen=True)
class ConventionChoice:
    """What one attempt chose for its task's open convention."""

    task_id: str
    kind: str
    """`name` or `module`: which convention the task leaves open."""
    chosen: str
    """`helpers.py`, ... (module tasks), `compute`, `get`, ... (name tasks), `other` or `none`."""
    followed: bool
    """The choice is the convention the hints reveal (`helpers.py`, `compute_<noun>`)."""
    passed: bool
    """Every hidden test passed (convention and function right)."""
    written: str | None = None
    """What was written in the convention's place, candidate or not: the first file name (module
    tasks) or the first function defined (name tasks); None when there is none."""

    def record(self) -> dict[str, Any]:
        return asdict(self)


@cache
def _tasks_by_id(convention: Convention) -> dict[str, ConventionTask]:
    return {task.task_id: task for tasks in generate(convention=convention).values() for task in tasks}


def convention_task(task_id: str) -> ConventionTask | None:
    """The generated convention task of that id (shipped seed), or None for any other task; an id
    that ends in `-<verb>-<module>` is a task of that convention (conventions.py, `Convention`)."""
    parts = task_id.split("-")
    convention = Convention()
    if len(parts) == 6:
        try:
            convention = Convention(parts[4], parts[5])
        except ValueError:
            return None
    return _tasks_by_id(convention).get(task_id)


def _arguments(call: dict[str, Any]) -> dict[str, Any]:
    raw = call.get("function", {}).get("arguments")
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except json.JSONDecodeError:
            return {}
    return raw if isinstance(raw, dict) else {}


def written_files(messages: Iterable[dict[str, Any]]) -> list[tuple[str, str]]:
    """(path, content) of every `write_file` call of the assistant messages, in order; calls whose
    arguments are not a JSON object with a string path are left out."""
    out = []
    for message in messages:
        if message.get("role") != "assistant":
            continue
        for call in message.get("tool_calls") or []:
            if call.get("function", {}).get("name") != "write_file":
                continue
            arguments = _arguments(call)
            if isinstance(arguments.get("path"), str):
                out.append((arguments["path"], str(arguments.get("content", ""))))
    return out


def defined_functions(source: str) -> list[str]:
    """The names of the functions a source text defines (`def name(`), in order."""
    return _DEFINED.findall(source)


def _file_name(path: str) -> str:
    return path.replace("\\", "/").rsplit("/", 1)[-1]


def classify(task: ConventionTask, files: Sequence[tuple[str, str]], passed: bool) -> ConventionChoice:
    """What an attempt that wrote `files` chose for `task`'s open convention."""
    if task.kind == "module":
        written = [_file_name(path) for path, _ in files]
        chosen = next((name for name in written if name in task.candidates), None)
        followed = chosen == f"{task.module}.py"
    else:
        written = [name for _, content in files for name in defined_functions(content)]
        name = next((name for name in written if name in task.candidates), None)
        chosen = name.split("_", 1)[0] if name else None
        followed = name == task.function
    if chosen is None:
        chosen = NO_CANDIDATE if files else NOTHING_WRITTEN
    return ConventionChoice(
        task.task_id, task.kind, chosen, followed, passed, written[0] if written else None
    )


def classify_attempt(
    task_id: str, messages: Iterable[dict[str, Any]], passed: bool
) -> ConventionChoice | None:
    """`classify` of an attempt's transcript; None when `task_id` is not a convention task."""
    task = convention_task(task_id)
    if task is None:
        return None
    return classify(task, written_files(messages), passed)


def choice_summary(choices: Iterable[ConventionChoice]) -> dict[str, dict[str, Any]]:
    """Per kind: attempts, how many followed the convention, its rate, and every choice's count."""
    choices = list(choices)
    out = {}
    for kind in KINDS:
        mine = [c for c in choices if c.kind == kind]
        if not mine:
            continue
        followed = sum(c.followed for c in mine)
        out[kind] = {
            "attempts": len(mine),
            "followed": followed,
            "rate": followed / len(mine),
            "passed": sum(c.passed for c in mine),
            "chosen": dict(sorted(Counter(c.chosen for c in mine).items())),
        }
    return out


def choice_metrics(choices: Iterable[ConventionChoice], prefix: str = "eval/") -> dict[str, float]:
    """Flat float metrics of `choice_summary`: `<prefix>convention_<kind>_rate` (the share of that
    kind's attempts that followed the convention) and `<prefix>convention_<kind>_followed` (their
    count); empty when no attempt was at a convention task."""
    out: dict[str, float] = {}
    for kind, row in choice_summary(choices).items():
        out[f"{prefix}convention_{kind}_rate"] = float(row["rate"])
        out[f"{prefix}convention_{kind}_followed"] = float(row["followed"])
        out[f"{prefix}convention_{kind}_attempts"] = float(row["attempts"])
    return out
