"""The `Task` record: what the agent is asked, and the hidden tests that grade it."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any


@dataclass(frozen=True)
class Task:
    """One coding task. The agent sees only `prompt`; `hidden_tests` run after the rollout."""

    task_id: str
    prompt: str
    hidden_tests: str
    """Python source. Either `test_*` functions (each one test), or top-level `assert` statements
    (each one test). The tests import the agent's files, e.g. `from solution import f`."""
    difficulty: str = "unknown"
    reference_solution: dict[str, str] | None = None
    """{filename: content} that passes every hidden test, when known."""
    solution_files: tuple[str, ...] = ("solution.py",)
    """Files the verifier copies from the agent's working directory (relative paths)."""
    metadata: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("task_id", "prompt", "hidden_tests"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value.strip():
                raise ValueError(f"Task.{name} must be a non-empty string, got {value!r}")
        if isinstance(self.solution_files, str):
            object.__setattr__(self, "solution_files", (self.solution_files,))
        if not self.solution_files:
            raise ValueError(f"task {self.task_id!r}: solution_files is empty")
        for name in self.solution_files:
            path = PurePosixPath(name)
            if not name or path.is_absolute() or ".." in path.parts:
                raise ValueError(
                    f"task {self.task_id!r}: solution file {name!r} must be a relative path inside the working directory"
                )
        if self.reference_solution is not None:
            extra = set(self.reference_solution) - set(self.solution_files)
            if extra:
                raise ValueError(
                    f"task {self.task_id!r}: reference_solution has files {sorted(extra)} that are not in "
                    f"solution_files {list(self.solution_files)}"
                )
