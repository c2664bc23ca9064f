"""The built-in Python coding tasks, from easy string functions to an expression evaluator.

Each task is a directory under environments/tasks/data/ (installed as package data): `task.json`,
`prompt.md`, data-style hidden tests in `tests.json` and the reference `solution.py`. They are
read by `load_task_dirs`, the loader users can point at their own task directories.
"""

from __future__ import annotations

import functools
from pathlib import Path

from environments.tasks.loaders import load_task_dirs
from environments.tasks.task import Task

DATA_DIR = Path(__file__).resolve().parent / "data"


@functools.cache
def _load() -> tuple[Task, ...]:
    return tuple(load_task_dirs(DATA_DIR))


def builtin_tasks() -> list[Task]:
    """All built-in tasks (easy, then medium, then hard), each with a reference solution."""
    return list(_load())
