"""Deterministic train/eval split by a stable hash of each task's id."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from environments.tasks.task import Task

DEFAULT_SALT = "hermes-opd-split-v1"


def split_bucket(task_id: str, salt: str = DEFAULT_SALT) -> float:
    """A number in [0, 1) that depends only on `salt` and `task_id` (not on Python's hash seed,
    the order of tasks, or the machine)."""
    digest = hashlib.sha256(f"{salt}\x00{task_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def is_eval_task(task_id: str, eval_fraction: float, salt: str = DEFAULT_SALT) -> bool:
    return split_bucket(task_id, salt) < eval_fraction


def split_tasks(
    tasks: Sequence[Task], eval_fraction: float = 0.1, salt: str = DEFAULT_SALT
) -> tuple[list[Task], list[Task]]:
    """(train, eval), each in the input order. A task's side depends only on its id and `salt`,
    except that with two or more tasks and 0 < eval_fraction < 1 neither side is left empty: the
    task with the lowest (or highest) bucket is moved over."""
    if not 0.0 <= eval_fraction <= 1.0:
        raise ValueError(f"eval_fraction must be in [0, 1], got {eval_fraction}")
    buckets = {t.task_id: split_bucket(t.task_id, salt) for t in tasks}
    eval_ids = {tid for tid, b in buckets.items() if b < eval_fraction}
    if len(buckets) >= 2 and 0.0 < eval_fraction < 1.0:
        if not eval_ids:
            eval_ids = {min(buckets, key=buckets.__getitem__)}
        elif len(eval_ids) == len(buckets):
            eval_ids.discard(max(buckets, key=buckets.__getitem__))
    train = [t for t in tasks if t.task_id not in eval_ids]
    evals = [t for t in tasks if t.task_id in eval_ids]
    return train, evals
