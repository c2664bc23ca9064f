"""Code-style hidden tests (a dataset's own Python test code) as a suite the verifier can run
without ever letting the solution near it. Pure logic (parsing, discovery); no I/O.

A code suite is a JSON object::

    {"kind": "code", "code": "def check(candidate):\\n    assert candidate(2) == 4\\n",
     "entry_point": "square", "context": "import math\\n", "public": ["test_example"]}

- `code`: the dataset's test code (HumanEval's `check(candidate)`, MBPP-like `assert f(x) == y`
  lines, or `test_*` functions). It runs in a trusted process of its own
  (environments/tasks/code_tests_child.py), in a sandbox of its own; never next to the solution.
- `entry_point`: the function under test. It is what `candidate` means for a `check` function.
- `context`: trusted code run before the tests, e.g. HumanEval's prompt (its helper functions,
  such as `poly`, are then the dataset's, not the solution's).
- Every other name the test code uses but neither it nor the context defines (and that is not a
  builtin) is a function of the solution: a remote procedure (environments/rollout/verifier_rpc.py).
- `public`: names of tests the agent may be told about in detail (see
  environments/rollout/verifier_feedback.py).

The tests: each top-level `test*` function; else `check(<entry_point>)` when the code defines
`check`; else each top-level `assert` statement.
"""

from __future__ import annotations

import ast
import builtins
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

CODE_KIND = "code"
CHECK_TEST = "check"
_KEYS = {"kind", "code", "entry_point", "context", "public"}


@dataclass(frozen=True)
class CodeTest:
    name: str
    source: str
    """Statements run in the test namespace (after the suite's code): the test itself."""


@dataclass(frozen=True)
class CodeSuite:
    code: str
    """The dataset's code, with every top-level assert moved into a test."""
    tests: tuple[CodeTest, ...]
    remote_names: tuple[str, ...]
    """Names bound to the solution's functions in the test namespace."""
    context: str = ""
    entry_point: str | None = None
    public: frozenset[str] = frozenset()

    @property
    def names(self) -> list[str]:
        return [t.name for t in self.tests]


def is_code_suite(value: Any) -> bool:
    return isinstance(value, Mapping) and value.get("kind") == CODE_KIND


def _parse(source: str, what: str) -> ast.Module:
    try:
        return ast.parse(source)
    except SyntaxError as exc:
        raise ValueError(f"{what} does not parse: {exc}") from None


def _defined_names(tree: ast.Module) -> set[str]:
    """Names bound anywhere at the top level of a module (defs, classes, imports, assignments)."""
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            for alias in node.names:
                names.add((alias.asname or alias.name).split(".")[0])
        else:
            for sub in ast.walk(node):
                if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store):
                    names.add(sub.id)
    return names


def _locally_bound(tree: ast.Module) -> set[str]:
    """Names bound inside functions, comprehensions and lambdas (arguments, assignments, imports)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store | ast.Del):
            names.add(node.id)
        elif isinstance(node, ast.alias):
            names.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.ExceptHandler):
            names.add(node.name or "")
    return names - {""}


def remote_names(code: str, context: str = "", entry_point: str | None = None) -> tuple[str, ...]:
    """The solution's functions the tests use: names loaded in `code` that nothing in `code` or
    `context` binds and that are not builtins; plus `entry_point`."""
    tree = _parse(code, "the test code")
    bound = _defined_names(_parse(context, "the test context")) | _locally_bound(tree)
    loaded = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    free = loaded - bound - set(dir(builtins))
    if entry_point:
        free.add(entry_point)
    return tuple(sorted(free))


def discover_tests(code: str, entry_point: str | None) -> tuple[str, tuple[CodeTest, ...]]:
    """(code to load, tests). `test*` functions; else `check(entry_point)`; else each top-level
    assert, moved out of the loaded code into a test of its own (named by its line)."""
    tree = _parse(code, "the test code")
    functions = [n.name for n in tree.body if isinstance(n, ast.FunctionDef)]
    named = [n for n in functions if n.startswith("test")]
    if named:
        return code, tuple(CodeTest(n, f"{n}()") for n in named)
    if CHECK_TEST in functions and entry_point:
        return code, (CodeTest(CHECK_TEST, f"{CHECK_TEST}({entry_point})"),)
    kept: list[ast.stmt] = []
    tests: list[CodeTest] = []
    for node in tree.body:
        if isinstance(node, ast.Assert):
            tests.append(CodeTest(f"test_assert_line_{node.lineno}", ast.unparse(node)))
        else:
            kept.append(node)
    if not tests:
        hint = " (it defines check(); give entry_point)" if CHECK_TEST in functions else ""
        raise ValueError(f"the test code defines no test functions and no top-level asserts{hint}")
    return ast.unparse(ast.Module(body=kept, type_ignores=[])) + "\n", tuple(tests)


def parse_code_suite(document: Mapping[str, Any]) -> CodeSuite:
    """Validate a code suite; ValueError says what is wrong."""
    unknown = set(document) - _KEYS
    if unknown:
        raise ValueError(f"code suite: unknown keys {sorted(unknown)}; known: {sorted(_KEYS)}")
    code = document.get("code")
    if isinstance(code, list | tuple) and all(isinstance(line, str) for line in code):
        code = "\n".join(code)
    if not isinstance(code, str) or not code.strip():
        raise ValueError("code suite: code must be non-empty Python source (or a list of lines)")
    entry_point = document.get("entry_point")
    if entry_point is not None and (not isinstance(entry_point, str) or not entry_point.isidentifier()):
        raise ValueError(f"code suite: entry_point must be a function name, got {entry_point!r}")
    context = document.get("context") or ""
    if not isinstance(context, str):
        raise ValueError("code suite: context must be Python source")
    public = document.get("public") or []
    if not isinstance(public, list | tuple) or not all(isinstance(n, str) for n in public):
        raise ValueError("code suite: public must be a list of test names")
    loaded, tests = discover_tests(code, entry_point)
    unknown_public = set(public) - {t.name for t in tests}
    if unknown_public:
        raise ValueError(f"code suite: public names unknown tests {sorted(unknown_public)}")
    return CodeSuite(
        code=loaded,
        tests=tests,
        remote_names=remote_names(code, context, entry_point),
        context=context,
        entry_point=entry_point,
        public=frozenset(public),
    )
