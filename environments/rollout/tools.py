"""The agent's tools (`terminal`, `write_file`, `read_file`, `patch`), their schemas, and dispatch.

File tools run in the host process (off the event loop) and may only touch the sandbox's working
directory: every path is walked one component at a time with O_NOFOLLOW from an open descriptor of
that directory, symbolic links are resolved by us (never by the kernel) and refused when they lead
outside, and writes replace files by rename, so nothing outside can be reached through a link, a
hard link, or a directory swapped mid-operation.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import secrets
import stat
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from environments.rollout.sandbox.limits import SandboxError
from environments.rollout.sandbox.sandbox import Sandbox
from environments.rollout.sandbox_output import parse_off_loop
from environments.rollout.tool_calls import ToolCall, ToolCallError
from hermes_opd.contract.errors import HermesOPDError

log = logging.getLogger(__name__)

MAX_READ_BYTES = 1024 * 1024
"""read_file/patch load at most this much of a file."""
MAX_READ_RESULT_CHARS = 20_000
"""read_file returns at most this many characters."""
_MAX_SYMLINK_HOPS = 40


@dataclass(frozen=True)
class ToolResult:
    """What the model sees as the tool message."""

    name: str
    content: str
    is_error: bool
    call_id: str = ""


class ToolError(HermesOPDError):
    """A failure the model should read and can fix; becomes an error ToolResult."""


class PathRefused(ToolError):
    """A path that is, or could lead, outside the working directory."""


# ---------------------------------------------------------------------------------------------
# Schemas.


def _schema(name: str, description: str, properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": properties,
                "required": required,
                "additionalProperties": False,
            },
        },
    }


_PATH = {"type": "string", "description": "File path relative to the working directory."}

TOOL_SCHEMAS: list[dict[str, Any]] = [
    _schema(
        "terminal",
        "Run a bash command in the working directory and return its combined stdout/stderr and exit "
        "code. No network access. Long output is truncated; commands that run too long are killed.",
        {"command": {"type": "string", "description": "The bash command to run."}},
        ["command"],
    ),
    _schema(
        "write_file",
        "Create or overwrite a file with the given content. Parent directories are created.",
        {"path": _PATH, "content": {"type": "string", "description": "The complete new file content."}},
        ["path", "content"],
    ),
    _schema(
        "read_file",
        "Read a text file. Optionally read only `limit` lines starting at line `offset` (1-based).",
        {
            "path": _PATH,
            "offset": {"type": "integer", "minimum": 1, "description": "First line to read (1-based)."},
            "limit": {"type": "integer", "minimum": 1, "description": "Maximum number of lines to read."},
        },
        ["path"],
    ),
    _schema(
        "patch",
        "Replace one exact occurrence of `old_string` in a file with `new_string`. `old_string` must "
        "match the file exactly (whitespace included) and occur exactly once.",
        {
            "path": _PATH,
            "old_string": {"type": "string", "description": "The exact text to replace (must be unique)."},
            "new_string": {"type": "string", "description": "The replacement text."},
        },
        ["path", "old_string", "new_string"],
    ),
]
TOOL_NAMES: frozenset[str] = frozenset(s["function"]["name"] for s in TOOL_SCHEMAS)
_PARAMETERS = {s["function"]["name"]: s["function"]["parameters"] for s in TOOL_SCHEMAS}


# ---------------------------------------------------------------------------------------------
# Argument validation (the JSON-schema subset the schemas above use).

_TYPE_CHECKS: dict[str, Callable[[Any], bool]] = {
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
}


def validate_arguments(parameters: dict[str, Any], arguments: dict[str, Any]) -> list[str]:
    """Problems with `arguments` against an object schema; empty when valid."""
    props: dict[str, Any] = parameters.get("properties", {})
    problems = [
        f"missing required argument {key!r} ({props.get(key, {}).get('type', 'any')})"
        for key in parameters.get("required", [])
        if key not in arguments
    ]
    for key, value in arguments.items():
        spec = props.get(key)
        if spec is None:
            if parameters.get("additionalProperties", True) is False:
                problems.append(f"unexpected argument {key!r}")
            continue
        expected = spec.get("type")
        if expected and not _TYPE_CHECKS[expected](value):
            problems.append(f"argument {key!r} must be of type {expected}, got {_json_type(value)}")
        elif "minimum" in spec and value < spec["minimum"]:
            problems.append(f"argument {key!r} must be >= {spec['minimum']}, got {value}")
    return problems


def _json_type(value: Any) -> str:
    for name in ("boolean", "integer", "number", "string", "object", "array"):
        if _TYPE_CHECKS[name](value):
            return name
    return "null" if value is None else type(value).__name__


def _signature(name: str) -> str:
    params = _PARAMETERS[name]
    required = set(params.get("required", []))
    fields = [
        f"{key}: {spec.get('type', 'any')}{'' if key in required else ' (optional)'}"
        for key, spec in params["properties"].items()
    ]
    return f"{name}({', '.join(fields)})"


# ---------------------------------------------------------------------------------------------
# The working-directory jail for file operations (runs in worker threads).


@dataclass(frozen=True)
class Jail:
    """A working directory, as an open descriptor plus its real path, and who should own new files."""

    dir_fd: int
    root: Path
    uid: int | None = None
    gid: int | None = None

    @classmethod
    def of(cls, sandbox: Sandbox) -> Jail:
        """The sandbox's working directory; use it in `sandbox.offload(...)`, which keeps the
        descriptor open for as long as the operation runs."""
        return cls(dir_fd=sandbox.dir_fd, root=sandbox.workdir, uid=sandbox.uid, gid=sandbox.gid)


def _split(jail: Jail, user_path: str) -> list[str]:
    if not user_path.strip():
        raise PathRefused("path is empty")
    if "\x00" in user_path:
        raise PathRefused("path contains a NUL byte")
    path = PurePosixPath(user_path)
    if path.is_absolute():
        try:
            path = path.relative_to(jail.root)
        except ValueError:
            raise PathRefused(
                f"absolute path {user_path!r} is outside the working directory ({jail.root}); "
                "use a path relative to the working directory"
            ) from None
    parts = [p for p in path.parts if p != "."]
    if ".." in parts:
        raise PathRefused(f"'..' is not allowed in paths ({user_path!r}); stay inside the working directory")
    if not parts:
        raise PathRefused(f"{user_path!r} is the working directory itself, not a file")
    return parts


def _follow_link(jail: Jail, parent: list[str], name: str, target: str, rest: list[str]) -> list[str]:
    """New component list after replacing `parent/name` by the link's `target`, if it stays inside."""
    shown = "/".join([*parent, name])
    target_path = PurePosixPath(target)
    if target_path.is_absolute():
        try:
            target_path = target_path.relative_to(jail.root)
        except ValueError:
            raise PathRefused(
                f"{shown!r} is a symbolic link to {target!r}, outside the working directory; refused"
            ) from None
        base: list[str] = []
    else:
        base = list(parent)
    for part in target_path.parts:
        if part == "..":
            if not base:
                raise PathRefused(
                    f"{shown!r} is a symbolic link to {target!r}, outside the working directory; refused"
                )
            base.pop()
        elif part not in (".", ""):
            base.append(part)
    return base + rest


def _open_dir(name: str, dir_fd: int) -> int:
    return os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)


def _readlink_or_none(name: str, dir_fd: int) -> str | None:
    try:
        return os.readlink(name, dir_fd=dir_fd)
    except OSError:
        return None


def _resolve(jail: Jail, user_path: str, *, create_parents: bool = False) -> tuple[int, str, str]:
    """Open the directory that holds `user_path`'s last component.

    Returns (directory fd, which the caller closes; final name; path shown in messages). The final
    component is a non-symlink or does not exist (as of this check; callers open with O_NOFOLLOW).
    """
    parts = _split(jail, user_path)
    for _ in range(_MAX_SYMLINK_HOPS):
        restart: list[str] | None = None
        fd = os.dup(jail.dir_fd)
        try:
            for i, name in enumerate(parts[:-1]):
                try:
                    nxt = _open_dir(name, fd)
                except FileNotFoundError:
                    if not create_parents:
                        raise ToolError(f"directory {'/'.join(parts[: i + 1])!r} does not exist") from None
                    with contextlib.suppress(FileExistsError):
                        os.mkdir(name, 0o755, dir_fd=fd)
                        if jail.uid is not None:
                            os.chown(name, jail.uid, jail.gid, dir_fd=fd, follow_symlinks=False)
                    nxt = _open_dir(name, fd)  # a race that swaps in a link fails here (ELOOP)
                except OSError as exc:
                    if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                        raise
                    target = _readlink_or_none(name, fd)
                    if target is None:
                        raise ToolError(f"{'/'.join(parts[: i + 1])!r} is not a directory") from None
                    restart = _follow_link(jail, parts[:i], name, target, parts[i + 1 :])
                    break
                os.close(fd)
                fd = nxt
            if restart is None:
                name = parts[-1]
                target = _readlink_or_none(name, fd)
                if target is None:
                    return fd, name, "/".join(parts)
                restart = _follow_link(jail, parts[:-1], name, target, [])
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)
        if not restart:
            raise PathRefused(f"{user_path!r} resolves to the working directory itself, not a file")
        parts = restart
    raise PathRefused(f"too many levels of symbolic links in {user_path!r}")


def read_bytes(jail: Jail, user_path: str, max_bytes: int, *, tail: bool = False) -> tuple[bytes, int, str]:
    """Read up to `max_bytes` of a regular file inside the jail (the last ones if `tail`).
    Returns (data, file size, shown path)."""
    dir_fd, name, shown = _resolve(jail, user_path)
    try:
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
        except FileNotFoundError:
            raise ToolError(f"file {shown!r} does not exist") from None
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise PathRefused(
                    f"{shown!r} changed into a symbolic link while being opened; refused"
                ) from None
            raise
    finally:
        os.close(dir_fd)
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise ToolError(f"{shown!r} is a directory, not a file")
        if not stat.S_ISREG(st.st_mode):
            raise PathRefused(f"{shown!r} is not a regular file")
        if st.st_nlink > 1 and jail.uid is not None and st.st_uid != jail.uid:
            # A hard link to a file the sandbox user does not own (e.g. made while
            # protected_hardlinks is off) would let us read it with our privileges.
            raise PathRefused(f"{shown!r} is a hard link to a file the sandbox user does not own; refused")
        if tail and st.st_size > max_bytes:
            os.lseek(fd, st.st_size - max_bytes, os.SEEK_SET)
        chunks = []
        remaining = max_bytes
        while remaining > 0 and (chunk := os.read(fd, min(remaining, 1 << 16))):
            chunks.append(chunk)
            remaining -= len(chunk)
        return b"".join(chunks), st.st_size, shown
    finally:
        os.close(fd)


def write_bytes(jail: Jail, user_path: str, data: bytes) -> str:
    """Create or replace a file inside the jail (via a temporary file and rename). Returns the shown path."""
    dir_fd, name, shown = _resolve(jail, user_path, create_parents=True)
    try:
        mode = 0o644
        try:
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            st = None
        if st is not None:
            if stat.S_ISDIR(st.st_mode):
                raise ToolError(f"{shown!r} is a directory, not a file")
            if stat.S_ISREG(st.st_mode):
                mode = stat.S_IMODE(st.st_mode) & 0o777
        tmp = f".{name[:100]}.tmp-{secrets.token_hex(6)}"
        fd = os.open(
            tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dir_fd
        )
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            if jail.uid is not None:
                os.fchown(fd, jail.uid, jail.gid)
            os.fchmod(fd, mode)
        except BaseException:
            os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=dir_fd)
            raise
        os.close(fd)
        try:
            os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=dir_fd)
            raise
        return shown
    finally:
        os.close(dir_fd)


# ---------------------------------------------------------------------------------------------
# The tools.


async def _terminal(args: dict[str, Any], sandbox: Sandbox) -> tuple[str, bool]:
    result = await sandbox.run(args["command"])
    body = result.output if result.output.strip() else "(no output)"
    body = body.rstrip("\n") + f"\n[exit code: {result.exit_code}]"
    return body, result.timed_out or result.exit_code != 0


def _max_file_bytes(sandbox: Sandbox) -> int:
    return sandbox.limits.file_size_mb * 1024 * 1024


async def _write_file(args: dict[str, Any], sandbox: Sandbox) -> tuple[str, bool]:
    data = args["content"].encode("utf-8", errors="replace")
    if len(data) > _max_file_bytes(sandbox):
        raise ToolError(f"content is {len(data)} bytes; the limit is {_max_file_bytes(sandbox)}")
    shown = await sandbox.offload(write_bytes, Jail.of(sandbox), args["path"], data)
    return f"Wrote {len(data)} bytes to {shown}.", False


async def _read_file(args: dict[str, Any], sandbox: Sandbox) -> tuple[str, bool]:
    data, size, shown = await sandbox.offload(read_bytes, Jail.of(sandbox), args["path"], MAX_READ_BYTES)
    return await parse_off_loop(
        _shown_lines, data, size, shown, args.get("offset", 1), args.get("limit")
    ), False


def _shown_lines(data: bytes, size: int, shown: str, offset: int, limit: int | None) -> str:
    """What read_file answers for the first bytes of a file: the asked lines, with notes."""
    text = data.decode("utf-8", errors="replace")
    notes = []
    if "\ufffd" in text and b"\xef\xbf\xbd" not in data:
        notes.append("the file is not valid UTF-8; undecodable bytes are shown as U+FFFD")
    if size > len(data):
        notes.append(f"only the first {len(data)} of {size} bytes were loaded")
    lines = text.splitlines(keepends=True)
    if offset > max(len(lines), 1):
        raise ToolError(f"offset {offset} is past the end of {shown} ({len(lines)} lines)")
    selected = lines[offset - 1 : None if limit is None else offset - 1 + limit]
    body = "".join(selected)
    if len(body) > MAX_READ_RESULT_CHARS:
        body = body[:MAX_READ_RESULT_CHARS]
        notes.append(f"output cut at {MAX_READ_RESULT_CHARS} characters; use offset/limit to read the rest")
    elif offset > 1 or (limit is not None and offset - 1 + limit < len(lines)):
        notes.append(f"showing lines {offset}-{offset - 1 + len(selected)} of {len(lines)}")
    if not body:
        body = "(empty file)"
    return body + "".join(f"\n[{note}]" for note in notes)


async def _patch(args: dict[str, Any], sandbox: Sandbox) -> tuple[str, bool]:
    old, new = args["old_string"], args["new_string"]
    if not old:
        raise ToolError("old_string is empty; give the exact text to replace")
    jail = Jail.of(sandbox)
    limit = min(MAX_READ_BYTES, _max_file_bytes(sandbox))
    data, size, shown = await sandbox.offload(read_bytes, jail, args["path"], limit)
    if size > len(data):
        raise ToolError(f"{shown} is too large to patch ({size} bytes; limit {limit})")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ToolError(f"{shown} is not valid UTF-8 text; cannot patch it") from None
    count = text.count(old)
    if count == 0:
        raise ToolError(
            f"old_string was not found in {shown}. It must match the file exactly, including "
            "whitespace and indentation; use read_file to see the current content"
        )
    if count > 1:
        raise ToolError(
            f"old_string occurs {count} times in {shown}; include more surrounding text so it matches "
            "exactly once"
        )
    updated = text.replace(old, new, 1).encode("utf-8", errors="replace")
    await sandbox.offload(write_bytes, jail, args["path"], updated)
    return (
        f"Patched {shown}: replaced 1 occurrence ({old.count(chr(10)) + 1} line(s) -> {new.count(chr(10)) + 1}).",
        False,
    )


ToolHandler = Callable[[dict[str, Any], Sandbox], Awaitable[tuple[str, bool]]]
_HANDLERS: dict[str, ToolHandler] = {
    "terminal": _terminal,
    "write_file": _write_file,
    "read_file": _read_file,
    "patch": _patch,
}
assert set(_HANDLERS) == TOOL_NAMES


async def execute_tool_call(call: ToolCall | ToolCallError, sandbox: Sandbox) -> ToolResult:
    """Run one parsed call in `sandbox`. Problems the model caused (bad arguments, refused paths,
    failing commands, unparseable calls) come back as error results, never as exceptions.
    Raises only SandboxError (the sandbox is closed or broken) and cancellation."""
    if isinstance(call, ToolCallError):
        return ToolResult(
            name=call.name or "invalid_tool_call",
            content=f"Error: {call.reason}",
            is_error=True,
            call_id=call.id,
        )
    handler = _HANDLERS.get(call.name)
    if handler is None:
        available = ", ".join(sorted(TOOL_NAMES))
        return _error(call, f"unknown tool {call.name!r}; available tools: {available}")
    problems = validate_arguments(_PARAMETERS[call.name], call.arguments)
    if problems:
        return _error(
            call,
            f"invalid arguments for {call.name}: {'; '.join(problems)}. Expected {_signature(call.name)}",
        )
    try:
        content, is_error = await handler(call.arguments, sandbox)
    except ToolError as exc:
        return _error(call, str(exc))
    except SandboxError:
        raise
    except OSError as exc:
        return _error(call, f"{call.name} failed: {exc.strerror or exc}")
    except Exception as exc:  # a bug in a tool must not end the rollout; log it and tell the model
        log.exception("tool %s crashed", call.name)
        return _error(call, f"{call.name} failed unexpectedly: {type(exc).__name__}")
    return ToolResult(name=call.name, content=content, is_error=is_error, call_id=call.id)


def _error(call: ToolCall, message: str) -> ToolResult:
    return ToolResult(name=call.name, content=f"Error: {message}", is_error=True, call_id=call.id)
