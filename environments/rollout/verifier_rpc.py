"""Code-style suites, unforgeable: the dataset's test code and the solution in two sandboxes, the
solution's functions called as remote procedures through this trusted process.

For each test (environments/tasks/code_suite.py), in order:

1. The solution's sandbox (only the solution files) runs `environments/tasks/code_candidate_child.py`:
   it answers call requests read from a FIFO in its working directory.
2. The tests' sandbox (empty) runs `environments/tasks/code_tests_child.py` with the dataset's code:
   every call of a solution function there becomes a request on a FIFO in its own directory.
3. Here, `_relay` moves each request to the solution and each reply back. A reply is parsed with
   the strict, bounded JSON parser and decoded into plain values (environments/tasks/suite_format.py),
   then encoded again by the trusted encoder, in a worker thread
   (environments/rollout/sandbox_output.py): all the solution can send is a plain value with exact
   types, the name of an exception, or nothing, and a reply too large or too complex to decode
   quickly is refused unread. No object of the solution's reaches the tests.
4. The test's verdict is what the tests' process reports; the solution never shares a process,
   a directory or a pipe with it. When the test ends, the solution's process is killed.

Per test: the tests' process has the per-test wall limit; the solution's process has the
sandbox's limits (RLIMIT_CPU and memory) and dies with the test.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shlex
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from environments.rollout.sandbox.limits import CommandResult, SandboxLimits
from environments.rollout.sandbox.sandbox import Sandbox
from environments.rollout.sandbox_output import parse_off_loop
from environments.rollout.tools import Jail, ToolError, read_bytes, write_bytes
from environments.tasks.code_suite import CodeSuite, CodeTest
from environments.tasks.suite_format import (
    MAX_REPORT_CHARS,
    MalformedResult,
    decode_value,
    encode_value,
    strict_json,
)

_TASKS = Path(__file__).resolve().parents[1] / "tasks"
_SHARED = (_TASKS / "suite_child.py").read_text(encoding="utf-8")
# suite_child.py's definitions (the one value encoder) with its own main switched off.
_PRELUDE = f"__name__ = 'hermes_value_codec'\n{_SHARED}\n__name__ = '__main__'\n"
CANDIDATE_SOURCE = _PRELUDE + (_TASKS / "code_candidate_child.py").read_text(encoding="utf-8")
TESTS_SOURCE = _PRELUDE + (_TASKS / "code_tests_child.py").read_text(encoding="utf-8")
TEST_RESULT_MARK = "@@hermes-code-test@@ "

REQUESTS_FIFO, REPLIES_FIFO = ".hermes-rpc-requests", ".hermes-rpc-replies"
CALLS_FIFO, RETURNS_FIFO = ".hermes-rpc-calls", ".hermes-rpc-returns"
MAX_MESSAGE_BYTES = MAX_REPORT_CHARS
"""A call or reply longer than this (one JSON line) is refused."""
_MAX_NAMES = 16


@dataclass(frozen=True)
class CodeTestVerdict:
    passed: bool
    message: str


async def run_code_suite(
    suite: CodeSuite,
    files: Mapping[str, bytes],
    modules: list[str],
    limits: SandboxLimits,
    *,
    python: str,
    per_test_timeout_s: float,
    timeout_s: float,
    output_file: str,
    root_dir: str | os.PathLike[str] | None = None,
    output_tail_chars: int = 2000,
) -> tuple[dict[str, CodeTestVerdict], bool, str]:
    """Run every test of `suite` against the solution `files` (importable as `modules`).
    Returns ({test name: verdict}, whether the whole run ran out of time, the end of what the
    solution printed)."""
    verdicts: dict[str, CodeTestVerdict] = {}
    deadline = time.monotonic() + timeout_s
    timed_out = False
    async with (
        Sandbox.create(limits, root_dir=root_dir) as solution_box,
        Sandbox.create(limits, root_dir=root_dir) as tests_box,
    ):
        jail = Jail.of(solution_box)
        for name, data in files.items():
            await solution_box.offload(write_bytes, jail, name, data)
        for test in suite.tests:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                timed_out = True
                verdicts[test.name] = CodeTestVerdict(False, "not run: the test run timed out")
                continue
            verdicts[test.name] = await _run_test(
                suite,
                test,
                modules,
                solution_box,
                tests_box,
                python=python,
                wall_s=min(per_test_timeout_s, remaining),
                output_file=output_file,
            )
        output_tail = ""
        if output_tail_chars:
            with contextlib.suppress(ToolError, OSError):
                data, _, _ = await solution_box.offload(
                    read_bytes, jail, output_file, output_tail_chars * 4, tail=True
                )
                output_tail = data.decode("utf-8", errors="replace")[-output_tail_chars:]
    return verdicts, timed_out, output_tail


def _fifo(box: Sandbox, name: str) -> int:
    """A fresh FIFO `name` in the box's directory, owned by its user; our end is read-write and
    non-blocking (opening never waits, and it never reads end-of-file)."""
    fd = box.dir_fd
    with contextlib.suppress(FileNotFoundError):
        os.unlink(name, dir_fd=fd)
    os.mkfifo(name, 0o600, dir_fd=fd)
    if box.uid is not None:
        os.chown(name, box.uid, box.gid if box.gid is not None else -1, dir_fd=fd, follow_symlinks=False)
    return os.open(name, os.O_RDWR | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)


async def _reader(fd: int) -> tuple[asyncio.StreamReader, asyncio.BaseTransport]:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=MAX_MESSAGE_BYTES)
    transport, _ = await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(fd, "rb", buffering=0, closefd=False)
    )
    return reader, transport


async def _write(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(fd, view) :]
        except BlockingIOError:
            await asyncio.sleep(0.001)


async def _run_test(
    suite: CodeSuite,
    test: CodeTest,
    modules: list[str],
    solution_box: Sandbox,
    tests_box: Sandbox,
    *,
    python: str,
    wall_s: float,
    output_file: str,
) -> CodeTestVerdict:
    fds = [
        _fifo(solution_box, REQUESTS_FIFO),
        _fifo(solution_box, REPLIES_FIFO),
        _fifo(tests_box, CALLS_FIFO),
        _fifo(tests_box, RETURNS_FIFO),
    ]
    requests, replies_fd, calls_fd, returns = fds
    transports: list[asyncio.BaseTransport] = []
    tasks: list[asyncio.Task] = []
    try:
        replies, transport = await _reader(replies_fd)
        transports.append(transport)
        calls, transport = await _reader(calls_fd)
        transports.append(transport)
        candidate_spec = {"requests": REQUESTS_FIFO, "replies": REPLIES_FIFO, "output_file": output_file}
        tests_spec = {
            "context": suite.context,
            "code": suite.code,
            "test": test.source,
            "remote": list(suite.remote_names),
            "modules": modules,
            "calls": CALLS_FIFO,
            "returns": RETURNS_FIFO,
            "output_file": ".tests-output",
            "timeout_s": wall_s,
        }
        solution = asyncio.create_task(
            solution_box.run(
                f"exec {shlex.quote(python)} -I -c {shlex.quote(CANDIDATE_SOURCE)}",
                timeout_s=wall_s + 5.0,
                stdin=json.dumps(candidate_spec).encode(),
            )
        )
        tests_run = asyncio.create_task(
            tests_box.run(
                f"exec {shlex.quote(python)} -I -c {shlex.quote(TESTS_SOURCE)}",
                timeout_s=wall_s + 2.0,
                stdin=json.dumps(tests_spec).encode(),
            )
        )
        relay = asyncio.create_task(_relay(calls, returns, requests, replies, solution))
        tasks = [solution, tests_run, relay]
        run = await tests_run
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(BaseException):
                await task
        for transport in transports:
            transport.close()
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)
    return await parse_off_loop(_verdict, run, wall_s)


def _verdict(run: CommandResult, wall_s: float) -> CodeTestVerdict:
    report = None
    for line in run.output.splitlines():
        if line.startswith(TEST_RESULT_MARK):
            with contextlib.suppress(MalformedResult):
                report = strict_json(line[len(TEST_RESULT_MARK) :])
    if isinstance(report, dict) and type(report.get("passed")) is bool:
        return CodeTestVerdict(report["passed"], str(report.get("message", ""))[:500])
    if run.timed_out:
        return CodeTestVerdict(False, f"timed out after {wall_s:g}s")
    tail = run.output.strip()[-300:]
    return CodeTestVerdict(
        False, f"the tests' process ended without a verdict (exit status {run.exit_code}): {tail}"
    )


async def _relay(
    calls: asyncio.StreamReader,
    returns: int,
    requests: int,
    replies: asyncio.StreamReader,
    solution: asyncio.Task,
) -> None:
    """Forever: one call from the tests, to the solution, one checked reply back."""
    call_id = 0
    broken = ""
    while True:
        try:
            line = await calls.readline()
        except ValueError:  # longer than the limit: the rest of it is refused as malformed below
            await _write(returns, _line({"error": f"the call was larger than {MAX_MESSAGE_BYTES} bytes"}))
            continue
        call_id += 1
        try:
            request = await parse_off_loop(_check_call, line, call_id)
        except ValueError as exc:
            await _write(returns, _line({"error": f"the call was refused: {exc}"}))
            continue
        if broken:
            await _write(returns, _line({"error": broken}))
            continue
        await _write(requests, request)
        answer, broken = await _answer(replies, solution, call_id)
        await _write(returns, answer)


def _line(message: dict) -> bytes:
    return (json.dumps(message) + "\n").encode()


def _check_call(line: bytes, call_id: int) -> bytes:
    """A call from the tests' process (the function's module and name, and plain arguments), as
    the request line for the solution."""
    call = strict_json(line)
    if not isinstance(call, dict) or set(call) != {"module", "name", "args", "kwargs"}:
        raise ValueError("malformed call")
    if not all(isinstance(call[k], str) and call[k].isidentifier() for k in ("module", "name")):
        raise ValueError("malformed call")
    if not isinstance(call["args"], list) or not isinstance(call["kwargs"], dict):
        raise ValueError("malformed call")
    decode_value(call["args"])
    decode_value(call["kwargs"])
    return _line({"id": call_id, **call})


async def _answer(replies: asyncio.StreamReader, solution: asyncio.Task, call_id: int) -> tuple[bytes, str]:
    """(the answer line for the tests, why the channel is broken from now on or "")."""
    reading = asyncio.ensure_future(replies.readline())
    try:
        await asyncio.wait({reading, solution}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        if not reading.done():
            reading.cancel()
    if not reading.done() or reading.cancelled():
        result = solution.result()
        why = f"the solution's process ended without answering (exit status {result.exit_code})"
        if result.timed_out:
            why = "the solution's process timed out without answering"
        return _line({"error": why}), why
    try:
        line = reading.result()
    except (ValueError, asyncio.LimitOverrunError):
        why = f"the solution's reply was larger than {MAX_MESSAGE_BYTES} bytes"
        return _line({"error": why}), why
    try:
        return await parse_off_loop(_checked_reply, line, call_id), ""
    except (MalformedResult, ValueError) as exc:
        why = f"the solution's reply was malformed ({str(exc)[:200]})"
        return _line({"error": why}), why


def _checked_reply(line: bytes, call_id: int) -> bytes:
    """The solution's reply, decoded strictly and encoded again by the trusted encoder, as the
    answer line for the tests."""
    return _line(_checked_answer(line, call_id))


def _checked_answer(line: bytes, call_id: int) -> dict:
    reply = strict_json(line)
    if not isinstance(reply, dict) or reply.get("id") != call_id or type(reply.get("id")) is not int:
        raise ValueError("not an answer to this call")
    if set(reply) == {"id", "value"}:
        return {"value": encode_value(decode_value(reply["value"]))}
    if set(reply) == {"id", "raised", "message"}:
        names, message = reply["raised"], reply["message"]
        if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
            raise ValueError("bad exception names")
        if not isinstance(message, str):
            raise ValueError("bad exception message")
        return {"raised": [n[:100] for n in names[:_MAX_NAMES]], "message": message[:500]}
    if set(reply) == {"id", "unencodable"} and isinstance(reply["unencodable"], str):
        return {"unencodable": reply["unencodable"][:80]}
    raise ValueError("unexpected fields")
