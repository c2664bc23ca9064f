"""Which convention each held-out attempt of an evaluation followed (environments/tasks/convention_choice.py)."""

from __future__ import annotations

from collections.abc import Sequence

from environments.delivery.group_builder import FinishedRollout
from environments.tasks.convention_choice import ConventionChoice, classify_attempt
from environments.tasks.task import Task


def eval_convention_choices(
    tasks: Sequence[Task], outcomes: Sequence[FinishedRollout | BaseException]
) -> list[ConventionChoice]:
    """One choice per finished attempt at a convention task, in task order; a failed rollout and a
    task of another family have none."""
    choices = []
    for task, outcome in zip(tasks, outcomes, strict=True):
        if isinstance(outcome, BaseException):
            continue
        verifier = outcome.info.get("verifier") or {}
        passed = verifier.get("passed") == verifier.get("total", 0) > 0
        choice = classify_attempt(task.task_id, outcome.trajectory.messages, passed)
        if choice is not None:
            choices.append(choice)
    return choices
