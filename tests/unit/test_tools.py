"""The agent's tools: schemas, argument validation, results, and working-directory containment."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from environments.rollout.sandbox.sandbox import Sandbox
from environments.rollout.tool_calls import ToolCall, ToolCallError, parse_tool_calls
from environments.rollout.tools import TOOL_NAMES, TOOL_SCHEMAS, ToolResult, execute_tool_call

PASSWD = Path("/etc/passwd")


def call(name: str, **arguments) -> ToolCall:
    return ToolCall(name=name, arguments=arguments, raw="", id=f"id-{name}")


@pytest.fixture
async def sb():
    async with Sandbox.create() as sandbox:
        yield sandbox


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A directory outside every sandbox, with a file the agent must never reach."""
    target = tmp_path / "outside"
    target.mkdir()
    (target / "secret.txt").write_text("do not read\n")
    return target


# -- schemas and validation -------------------------------------------------------------------


def test_schemas_are_openai_function_tools():
    assert (
        {s["function"]["name"] for s in TOOL_SCHEMAS}
        == TOOL_NAMES
        == {"terminal", "write_file", "read_file", "patch"}
    )
    for schema in TOOL_SCHEMAS:
        assert schema["type"] == "function"
        fn = schema["function"]
        assert fn["description"]
        params = fn["parameters"]
        assert params["type"] == "object"
        assert set(params["required"]) <= set(params["properties"])
        assert all(p.get("description") for p in params["properties"].values())
    json.dumps(TOOL_SCHEMAS)


async def test_missing_and_mistyped_arguments_are_readable_errors(sb):
    result = await execute_tool_call(call("write_file", path="a.txt"), sb)
    assert result.is_error and result.name == "write_file" and result.call_id == "id-write_file"
    assert "missing required argument 'content' (string)" in result.content
    assert "Expected write_file(path: string, content: string)" in result.content

    result = await execute_tool_call(call("read_file", path="a.txt", offset=True, limit="3", extra=1), sb)
    assert "'offset' must be of type integer, got boolean" in result.content
    assert "'limit' must be of type integer, got string" in result.content
    assert "unexpected argument 'extra'" in result.content

    result = await execute_tool_call(call("read_file", path="a.txt", offset=0), sb)
    assert "'offset' must be >= 1" in result.content


async def test_parse_errors_and_unknown_tools_become_error_results(sb):
    error = ToolCallError(raw="<tool_call>{x</tool_call>", reason="tool call is not valid JSON", id="e1")
    result = await execute_tool_call(error, sb)
    assert result == ToolResult(
        name="invalid_tool_call", content="Error: tool call is not valid JSON", is_error=True, call_id="e1"
    )
    result = await execute_tool_call(call("browser", url="x"), sb)
    assert result.is_error and "unknown tool 'browser'" in result.content


# -- terminal ---------------------------------------------------------------------------------


async def test_terminal_reports_output_and_exit_code(sb):
    ok = await execute_tool_call(call("terminal", command="echo hi"), sb)
    assert ok == ToolResult(
        name="terminal", content="hi\n[exit code: 0]", is_error=False, call_id="id-terminal"
    )
    failed = await execute_tool_call(call("terminal", command="ls no-such-file"), sb)
    assert failed.is_error and "No such file" in failed.content and failed.content.endswith("[exit code: 2]")
    quiet = await execute_tool_call(call("terminal", command="true"), sb)
    assert quiet.content == "(no output)\n[exit code: 0]"


# -- write / read / patch ---------------------------------------------------------------------


async def test_write_then_read_and_the_sandbox_user_owns_the_file(sb):
    result = await execute_tool_call(call("write_file", path="pkg/mod.py", content="x = 1\ny = 2\n"), sb)
    assert not result.is_error and result.content == "Wrote 12 bytes to pkg/mod.py."
    assert (sb.workdir / "pkg" / "mod.py").read_text() == "x = 1\ny = 2\n"
    if sb.uid is not None:
        assert (sb.workdir / "pkg" / "mod.py").stat().st_uid == sb.uid
        assert (sb.workdir / "pkg").stat().st_uid == sb.uid
    shell = await sb.run("echo 'z = 3' >> pkg/mod.py && cat pkg/mod.py")
    assert shell.exit_code == 0 and "z = 3" in shell.output
    read = await execute_tool_call(call("read_file", path="./pkg/mod.py"), sb)
    assert read.content == "x = 1\ny = 2\nz = 3\n"


async def test_absolute_path_inside_the_workdir_is_allowed(sb):
    result = await execute_tool_call(call("write_file", path=str(sb.workdir / "abs.txt"), content="ok"), sb)
    assert not result.is_error and (sb.workdir / "abs.txt").read_text() == "ok"


async def test_read_with_offset_and_limit(sb):
    await execute_tool_call(
        call("write_file", path="n.txt", content="".join(f"line{i}\n" for i in range(1, 11))), sb
    )
    result = await execute_tool_call(call("read_file", path="n.txt", offset=3, limit=2), sb)
    assert result.content == "line3\nline4\n\n[showing lines 3-4 of 10]"
    past = await execute_tool_call(call("read_file", path="n.txt", offset=50), sb)
    assert past.is_error and "past the end" in past.content


async def test_read_errors(sb):
    missing = await execute_tool_call(call("read_file", path="nope.txt"), sb)
    assert missing.is_error and "does not exist" in missing.content
    await sb.run("mkdir d")
    directory = await execute_tool_call(call("read_file", path="d"), sb)
    assert directory.is_error and "is a directory" in directory.content
    await sb.run("printf 'a\\377b' > bin.dat")
    binary = await execute_tool_call(call("read_file", path="bin.dat"), sb)
    assert not binary.is_error and "a\ufffdb" in binary.content and "not valid UTF-8" in binary.content


async def test_patch_replaces_exactly_one_occurrence(sb):
    await execute_tool_call(call("write_file", path="s.py", content="def f():\n    return 1\n"), sb)
    ok = await execute_tool_call(call("patch", path="s.py", old_string="return 1", new_string="return 2"), sb)
    assert not ok.is_error and "replaced 1 occurrence" in ok.content
    assert (sb.workdir / "s.py").read_text() == "def f():\n    return 2\n"


async def test_patch_errors_name_the_problem(sb):
    await execute_tool_call(call("write_file", path="s.py", content="a = 1\na = 1\n"), sb)
    missing = await execute_tool_call(call("patch", path="s.py", old_string="b = 1", new_string="c"), sb)
    assert missing.is_error and "old_string was not found in s.py" in missing.content
    ambiguous = await execute_tool_call(call("patch", path="s.py", old_string="a = 1", new_string="c"), sb)
    assert ambiguous.is_error and "occurs 2 times" in ambiguous.content
    empty = await execute_tool_call(call("patch", path="s.py", old_string="", new_string="c"), sb)
    assert empty.is_error and "old_string is empty" in empty.content
    assert (sb.workdir / "s.py").read_text() == "a = 1\na = 1\n"


async def test_write_file_content_limit(sb):
    limit = sb.limits.file_size_mb * 1024 * 1024
    result = await execute_tool_call(call("write_file", path="big.txt", content="x" * (limit + 1)), sb)
    assert result.is_error and "the limit is" in result.content
    assert not (sb.workdir / "big.txt").exists()


# -- containment ------------------------------------------------------------------------------


@pytest.mark.parametrize("tool", ["write_file", "read_file", "patch"])
@pytest.mark.parametrize("path", ["../../etc/passwd", "/etc/passwd", "a/../../x", "..", "/", ""])
async def test_paths_that_leave_the_workdir_are_refused(sb, tool, path):
    before = PASSWD.read_bytes()
    args = {"path": path, "content": "pwned\n", "old_string": "root", "new_string": "pwned"}
    keys = {
        "write_file": ("path", "content"),
        "read_file": ("path",),
        "patch": ("path", "old_string", "new_string"),
    }
    result = await execute_tool_call(call(tool, **{k: args[k] for k in keys[tool]}), sb)
    assert result.is_error
    assert "root:" not in result.content
    assert any(
        phrase in result.content
        for phrase in (
            "'..' is not allowed",
            "outside the working directory",
            "path is empty",
            "working directory itself",
        )
    ), result.content
    assert PASSWD.read_bytes() == before


async def test_symlinks_pointing_outside_are_refused(sb, outside):
    await sb.run(
        f"ln -s {outside} out_dir; ln -s {outside}/secret.txt out_file; ln -s ../../.. up; ln -s /etc etc"
    )
    cases = [
        call("read_file", path="out_file"),
        call("read_file", path="out_dir/secret.txt"),
        call("read_file", path="up/etc/passwd"),
        call("read_file", path="etc/passwd"),
        call("write_file", path="out_file", content="overwritten"),
        call("write_file", path="out_dir/new.txt", content="x"),
        call("write_file", path="etc/passwd", content="x"),
        call("patch", path="out_file", old_string="do not", new_string="did"),
    ]
    for c in cases:
        result = await execute_tool_call(c, sb)
        assert result.is_error, (c, result)
        assert "symbolic link" in result.content and "outside the working directory" in result.content
        assert "do not read" not in result.content
    assert (outside / "secret.txt").read_text() == "do not read\n"
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]


async def test_symlinks_inside_the_workdir_are_followed(sb):
    await sb.run(
        "mkdir -p real/sub && echo hi > real/sub/f.txt && ln -s real alias && ln -s sub/f.txt real/link"
    )
    read = await execute_tool_call(call("read_file", path="alias/sub/f.txt"), sb)
    assert read.content == "hi\n"
    via_file_link = await execute_tool_call(call("read_file", path="real/link"), sb)
    assert via_file_link.content == "hi\n"
    write = await execute_tool_call(call("write_file", path="alias/new.txt", content="n"), sb)
    assert not write.is_error and (sb.workdir / "real" / "new.txt").read_text() == "n"
    await execute_tool_call(call("write_file", path="real/link", content="via link"), sb)
    assert (sb.workdir / "real" / "sub" / "f.txt").read_text() == "via link"
    assert (sb.workdir / "real" / "link").is_symlink()


async def test_symlink_loops_are_refused(sb):
    await sb.run("ln -s b a; ln -s a b")
    result = await execute_tool_call(call("read_file", path="a"), sb)
    assert result.is_error and "too many levels of symbolic links" in result.content


async def test_hard_links_to_outside_files_are_not_read_or_written_through(sb, outside):
    try:
        os.link(outside / "secret.txt", sb.workdir / "hl.txt")  # as if the agent could make one
    except OSError:  # EXDEV: the container is a tmpfs of its own; use a host file on it instead
        outside = sb.workdir.parent
        (outside / "secret.txt").write_text("do not read\n")
        os.link(outside / "secret.txt", sb.workdir / "hl.txt")
    read = await execute_tool_call(call("read_file", path="hl.txt"), sb)
    assert read.is_error and "hard link to a file the sandbox user does not own" in read.content
    write = await execute_tool_call(call("write_file", path="hl.txt", content="replaced"), sb)
    assert not write.is_error
    assert (sb.workdir / "hl.txt").read_text() == "replaced"
    assert (outside / "secret.txt").read_text() == "do not read\n"  # the write replaced the link


async def test_hard_links_the_agent_made_itself_are_fine(sb):
    await sb.run("echo mine > a.txt && ln a.txt b.txt")
    read = await execute_tool_call(call("read_file", path="b.txt"), sb)
    assert not read.is_error and read.content == "mine\n"


async def test_fifo_and_devices_are_refused_without_blocking(sb):
    await sb.run("mkfifo pipe")
    start = time.monotonic()
    result = await execute_tool_call(call("read_file", path="pipe"), sb)
    assert result.is_error and "not a regular file" in result.content
    assert time.monotonic() - start < 2


async def test_dispatching_a_parsed_turn_runs_valid_calls_and_reports_errors(sb):
    text = (
        '<tool_call>{"name": "write_file", "arguments": {"path": "a.txt", "content": "A"}}</tool_call>'
        "<tool_call>{broken</tool_call>"
        '<tool_call>{"name": "terminal", "arguments": "{\\"command\\": \\"cat a.txt\\"}"}</tool_call>'
    )
    turn = parse_tool_calls(text, TOOL_NAMES)
    results = [await execute_tool_call(c, sb) for c in turn.calls]
    assert [r.is_error for r in results] == [False, True, False]
    assert results[2].content == "A\n[exit code: 0]"
    assert [r.call_id for r in results] == [c.id for c in turn.calls]
