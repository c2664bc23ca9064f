"""Exit codes are defined once (hermes_opd/runtime/exit_codes.py) and imported by every command."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
COMMANDS = (
    "hermes_opd/commands/process.py",
    "hermes_opd/commands/send.py",
    "hermes_opd/commands/cli_input.py",
    "hermes_opd/commands/demo.py",
    "environments/atropos/cli.py",
)


def _assigned_exit_codes(tree: ast.AST) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                for leaf in ast.walk(target):
                    if isinstance(leaf, ast.Name) and leaf.id.startswith("EXIT_"):
                        names.add(leaf.id)
    return names


def test_one_exit_code_module_used_by_every_command():
    for relative in COMMANDS:
        tree = ast.parse((ROOT / relative).read_text())
        assert not _assigned_exit_codes(tree), f"{relative} defines its own exit codes"
        assert any(
            isinstance(n, ast.ImportFrom) and n.module == "hermes_opd.runtime.exit_codes"
            for n in ast.walk(tree)
        ), relative


def test_no_other_module_defines_them():
    for package in ("hermes_opd/commands", "environments", "trainer_adapters"):
        for path in (ROOT / package).rglob("*.py"):
            if path.name == "exit_codes.py":
                continue
            assert not _assigned_exit_codes(ast.parse(path.read_text())), path.relative_to(ROOT)
