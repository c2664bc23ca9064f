"""The built-in Python coding tasks, from easy string functions to an expression evaluator."""

from __future__ import annotations

from environments.tasks import builtin_easy, builtin_hard, builtin_medium
from environments.tasks.task import Task


def builtin_tasks() -> list[Task]:
    """All built-in tasks (easy, then medium, then hard), each with a reference solution."""
    return [*builtin_easy.TASKS, *builtin_medium.TASKS, *builtin_hard.TASKS]
