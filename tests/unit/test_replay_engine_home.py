"""The replay engine sits beside the send spool and talks to the Atropos API only through the spool's
client; `commands/` holds commands, and `process` shares `send`'s flags through cli_input, not send_groups."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ENGINE = ROOT / "environments/delivery/group_replay.py"


def _imports(path: Path) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
    return out


def test_the_engine_and_its_cursor_live_beside_the_spool():
    assert ENGINE.exists() and (ROOT / "environments/delivery/send_cursor.py").exists()
    for name in ("group_replay", "send_cursor"):
        assert importlib.util.find_spec(f"hermes_opd.commands.{name}") is None


def test_the_engine_opens_no_http_session_of_its_own():
    source = ENGINE.read_text()
    assert "ClientSession(" not in source and "session.get(" not in source and "session.post(" not in source
    tree = ast.parse(source)
    used = {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module == "environments.delivery.send_spool"
        for alias in node.names
    }
    assert {"api_session", "get_api_json", "post_payload", "post_with_retries"} <= used


def test_process_takes_no_helper_from_send_groups():
    process = ROOT / "hermes_opd/commands/process.py"
    assert "hermes_opd.commands.send" not in _imports(process)
    assert "hermes_opd.commands.cli_input" in _imports(process)
    assert "hermes_opd.commands.cli_input" in _imports(ROOT / "hermes_opd/commands/send.py")
