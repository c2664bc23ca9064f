"""The built-in stdin/stdout task set: 22 small programs (sums, primes, brackets, a triangle's area,
...), each a task directory under environments/tasks/stdio_data/ (package data) with `task.json`,
`prompt.md`, a stdio suite in `tests.json` (six cases, the first public and shown in the prompt)
and the reference `solution.py`. Read by `load_task_dirs`, like the built-in Python tasks; use it
with `task_source: dirs` and `task_path` set to STDIO_DATA_DIR, or through `stdio_tasks()`.
"""

from __future__ import annotations

import functools
from pathlib import Path

from environments.tasks.loaders import load_task_dirs
from environments.tasks.task import Task

STDIO_DATA_DIR = Path(__file__).resolve().parent / "stdio_data"


@functools.cache
def _load() -> tuple[Task, ...]:
    return tuple(load_task_dirs(STDIO_DATA_DIR))


def stdio_tasks() -> list[Task]:
    """All built-in stdin/stdout tasks, each with a reference solution."""
    return list(_load())
