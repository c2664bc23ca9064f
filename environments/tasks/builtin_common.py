"""Helper for writing the built-in tasks as readable, indented source text."""

from __future__ import annotations

import textwrap

from environments.tasks.task import Task

SOLUTION_FILE = "solution.py"


def make_task(task_id: str, difficulty: str, prompt: str, *, tests: str, solution: str) -> Task:
    """A single-file Python task; `prompt`, `tests` and `solution` are dedented."""
    body = textwrap.dedent(prompt).strip()
    instructions = (
        f"Write your solution in the file `{SOLUTION_FILE}` in the current working directory. "
        "Hidden tests will import it, so use exactly the names given above. "
        "Only the Python standard library is available."
    )
    return Task(
        task_id=task_id,
        prompt=f"{body}\n\n{instructions}",
        hidden_tests=textwrap.dedent(tests).strip() + "\n",
        difficulty=difficulty,
        reference_solution={SOLUTION_FILE: textwrap.dedent(solution).strip() + "\n"},
        solution_files=(SOLUTION_FILE,),
    )
