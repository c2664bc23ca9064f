"""Tasks: the `Task` record, built-in coding tasks (package data), loaders (task directories, JSONL,
Hugging Face datasets), and a deterministic train/eval split. Importing this package does not
import `datasets`."""

from environments.tasks.builtin import builtin_tasks
from environments.tasks.loaders import (
    TaskLoadError,
    load_hf_tasks,
    load_jsonl_tasks,
    load_task_dirs,
    task_from_record,
)
from environments.tasks.split import is_eval_task, split_bucket, split_tasks
from environments.tasks.task import Task

__all__ = [
    "Task",
    "TaskLoadError",
    "builtin_tasks",
    "is_eval_task",
    "load_hf_tasks",
    "load_jsonl_tasks",
    "load_task_dirs",
    "split_bucket",
    "split_tasks",
    "task_from_record",
]
