"""The `Task` record: what the agent is asked, and the hidden tests that grade it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from environments.tasks.code_suite import is_code_suite
from environments.tasks.file_names import UnsafeFileName, checked_name
from environments.tasks.stdio_suite import is_stdio_suite
from environments.tasks.suites import parse_tests


@dataclass(frozen=True)
class Task:
    """One coding task. The agent sees only `prompt`; `hidden_tests` run after the rollout."""

    task_id: str
    prompt: str
    hidden_tests: str | Mapping[str, Any]
    """One of three shapes (environments/tasks/suites.py): data-style tests (a mapping with
    "tests", environments/tasks/suite_format.py; every built-in task); code-style tests (the
    dataset's own Python test code, a string or `{"kind": "code", ...}`,
    environments/tasks/code_suite.py), run in a trusted process of their own with the solution
    as a remote procedure; or stdin/stdout cases (`{"kind": "stdio", ...}`,
    environments/tasks/stdio_suite.py). See docs/tasks.md."""
    difficulty: str = "unknown"
    reference_solution: dict[str, str] | None = None
    """{filename: content} that passes every hidden test, when known."""
    solution_files: tuple[str, ...] = ("solution.py",)
    """Files the verifier copies from the agent's working directory (relative paths)."""
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def data_tests(self) -> bool:
        """True for data-style hidden tests (inputs and expected values)."""
        return isinstance(self.hidden_tests, Mapping) and not (
            is_code_suite(self.hidden_tests) or is_stdio_suite(self.hidden_tests)
        )

    def __post_init__(self) -> None:
        names = (
            ("task_id", "prompt")
            if isinstance(self.hidden_tests, Mapping)
            else ("task_id", "prompt", "hidden_tests")
        )
        for name in names:
            value = getattr(self, name)
            if not isinstance(value, str) or not value.strip():
                raise ValueError(f"Task.{name} must be a non-empty string, got {value!r}")
        try:
            parse_tests(self.hidden_tests)
        except ValueError as exc:
            raise ValueError(f"task {self.task_id!r}: hidden tests: {exc}") from None
        if isinstance(self.solution_files, str):
            object.__setattr__(self, "solution_files", (self.solution_files,))
        if not self.solution_files:
            raise ValueError(f"task {self.task_id!r}: solution_files is empty")
        for name in self.solution_files:
            try:
                checked_name(name)
            except UnsafeFileName as exc:
                raise ValueError(
                    f"task {self.task_id!r}: a solution file must be a relative path inside the working directory: {exc}"
                ) from None
        if self.reference_solution is not None:
            extra = set(self.reference_solution) - set(self.solution_files)
            if extra:
                raise ValueError(
                    f"task {self.task_id!r}: reference_solution has files {sorted(extra)} that are not in "
                    f"solution_files {list(self.solution_files)}"
                )
