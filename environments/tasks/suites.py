"""The three shapes of hidden tests, and which one a task's `hidden_tests` is:

- data-style (environments/tasks/suite_format.py): an object with "tests"; inputs and expected
  values, judged outside the solution's process;
- code-style (environments/tasks/code_suite.py): `{"kind": "code", ...}`, or plain Python source
  (a string), the dataset's own test code run in a trusted process of its own;
- stdin/stdout (environments/tasks/stdio_suite.py): `{"kind": "stdio", ...}`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from environments.tasks.code_suite import CODE_KIND, CodeSuite, is_code_suite, parse_code_suite
from environments.tasks.stdio_suite import StdioSuite, is_stdio_suite, parse_stdio_suite
from environments.tasks.suite_format import TestSuite, parse_suite

Suite = TestSuite | CodeSuite | StdioSuite


def parse_tests(hidden_tests: str | Mapping[str, Any]) -> Suite:
    """The suite a task's `hidden_tests` describes; ValueError says what is wrong."""
    if isinstance(hidden_tests, str):
        return parse_code_suite({"kind": CODE_KIND, "code": hidden_tests})
    if is_code_suite(hidden_tests):
        return parse_code_suite(hidden_tests)
    if is_stdio_suite(hidden_tests):
        return parse_stdio_suite(hidden_tests)
    if "kind" in hidden_tests:
        raise ValueError(f"unknown kind of hidden tests {hidden_tests['kind']!r}; known: code, stdio")
    return parse_suite(hidden_tests)


def public_test_names(suite: Suite) -> frozenset[str]:
    """The tests the suite itself marks public."""
    if isinstance(suite, TestSuite):
        return frozenset(t.name for t in suite.tests if t.public)
    return suite.public
