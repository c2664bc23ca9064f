"""Grade a rollout by running the task's hidden tests against the agent's solution files.

1. Copy the task's `solution_files` from the agent's working directory (regular files only, no
   links, size-capped) into a fresh sandbox. Nothing else comes along: not the agent's own tests,
   not a `conftest.py`, not a module that shadows the standard library.
2. Data-style tests (`environments/tasks/suite_format.py`, every built-in task): pass or fail is
   decided HERE, in the trusted process, which never imports or runs the solution. The tests run
   in the sandbox as `python3 -I -c <environments/tasks/suite_child.py>`: one process for the tests
   without a CPU budget, and one per test with one (`cpu_s`, its RLIMIT_CPU). That process
   receives only the tests' inputs (expressions to evaluate), imports the solution, and returns
   what each expression returned or raised, as tagged JSON, one line per test. Here that report is parsed with a strict JSON parser into plain values and
   compared with the expectations, which never leave this process, with exact types. The solution
   may control everything in its process (patch the stdlib, walk frames, read /proc/self); all it
   can change is a claim about values, and a claim only passes when it is the right answer.
3. Code-style tests (a Python source with `test_*` functions or top-level asserts; only from user
   datasets, with a loud warning when loaded): the legacy runner below executes them next to the
   solution, in the same interpreter, so such a score can be forged (see docs/sandbox.md).

`verify()` never raises for anything the agent did, nor for an internal failure: those score 0,
with the reason in the feedback.
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import json
import logging
import math
import os
import secrets
import shlex
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from environments.rollout.sandbox.limits import TIMEOUT_EXIT_CODE, SandboxLimits
from environments.rollout.sandbox.sandbox import Sandbox
from environments.rollout.tools import Jail, ToolError, read_bytes, write_bytes
from environments.tasks.suite_child import RESULT_MARK as CHILD_RESULT_MARK
from environments.tasks.suite_format import MalformedResult, TestSuite, judge_test, parse_suite, strict_json
from environments.tasks.task import Task

log = logging.getLogger(__name__)

RESULT_MARK = "@@hermes-test-result@@"
TEST_OUTPUT_FILE = ".test-output"
"""Inside the verification sandbox: where the code under test's stdout/stderr goes."""
HIDDEN_TESTS_FILENAME = "hidden_tests.py"
"""The file name the tests are compiled under (for tracebacks); never written to disk."""
CHILD_SOURCE = (Path(__file__).parents[1] / "tasks" / "suite_child.py").read_text(encoding="utf-8")


class VerifierConfig(BaseModel):
    """How hidden tests are run and scored."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    python: str = Field(
        "python3", description="Python interpreter inside the sandbox (looked up on its PATH)."
    )
    timeout_s: float = Field(60.0, gt=0, description="Wall-clock limit for the whole test run.")
    per_test_timeout_s: float = Field(
        10.0, gt=0, description="Wall-clock limit for one test (a batch of n tests gets n times this)."
    )
    max_solution_bytes: int = Field(
        1024 * 1024, ge=1, description="A solution file larger than this is treated as missing."
    )
    efficiency_weight: float = Field(
        0.0,
        ge=0.0,
        le=1.0,
        description="Score = pass_fraction * (1 - efficiency_weight * min(1, turns_used / max_turns)). "
        "0 disables shaping.",
    )
    show_assertion_source: bool = Field(
        True,
        description="Feedback quotes the hidden test's failing line (reveals test inputs to whoever reads it).",
    )
    feedback_max_chars: int = Field(2000, ge=100, description="Cap on the feedback text.")
    output_tail_chars: int = Field(2000, ge=0, description="How much of the end of the test output to keep.")


@dataclass(frozen=True)
class TestOutcome:
    name: str
    passed: bool
    message: str = ""


@dataclass(frozen=True)
class VerificationResult:
    score: float
    passed: int
    total: int
    output_tail: str
    """The end of what the code under test printed (stdout and stderr)."""
    feedback: str
    """For the agent: empty when every test passed; else failing tests and why (truncated)."""
    tests: list[TestOutcome] = field(default_factory=list)
    missing_files: list[str] = field(default_factory=list)
    timed_out: bool = False

    @property
    def pass_fraction(self) -> float:
        return self.passed / self.total if self.total else 0.0


# ---------------------------------------------------------------------------------------------
# Test discovery (host side; the runner only runs the names it is given).


def collect_tests(source: str) -> tuple[str, list[str]]:
    """(source to run, ordered test names). Top-level `test*` functions are the tests; a source
    without any has each top-level `assert` turned into its own test function."""
    try:
        tree = ast.parse(source, filename=HIDDEN_TESTS_FILENAME)
    except SyntaxError as exc:
        raise ValueError(f"hidden tests do not parse: {exc}") from exc
    names = [n.name for n in tree.body if isinstance(n, ast.FunctionDef) and n.name.startswith("test")]
    if names:
        return source, names
    body: list[ast.stmt] = []
    for node in tree.body:
        if isinstance(node, ast.Assert):
            name = f"test_assert_line_{node.lineno}"
            func = ast.parse(f"def {name}():\n    pass").body[0]
            assert isinstance(func, ast.FunctionDef)
            func.body = [node]
            body.append(func)
            names.append(name)
        else:
            body.append(node)
    if not names:
        raise ValueError("hidden tests define no test functions and no top-level asserts")
    module = ast.fix_missing_locations(ast.Module(body=body, type_ignores=[]))
    return ast.unparse(module) + "\n", names


# ---------------------------------------------------------------------------------------------
# The runner, executed inside the sandbox as `python3 -I -c RUNNER`.

RUNNER = r"""
import json, os, signal, sys, traceback

def _main():
    spec = json.loads(sys.stdin.read())
    nonce, source, names = spec["nonce"], spec["source"], spec["tests"]
    per_test, show_source = spec["per_test_timeout_s"], spec["show_source"]
    channel = os.fdopen(os.dup(1), "w", encoding="utf-8")
    sink = os.open(spec["output_file"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND | os.O_NOFOLLOW, 0o600)
    os.dup2(sink, 1)
    os.dup2(sink, 2)
    os.close(sink)
    prefix = "\n" + spec["mark"] + nonce + " "

    def emit(record):
        channel.write(prefix + json.dumps(record) + "\n")
        channel.flush()

    lines = source.splitlines()

    def describe(exc):
        text = type(exc).__name__
        detail = str(exc)
        if detail:
            text += ": " + detail
        if show_source:
            for frame in reversed(traceback.extract_tb(exc.__traceback__)):
                if frame.filename == spec["filename"] and 1 <= frame.lineno <= len(lines):
                    text += " (at: " + lines[frame.lineno - 1].strip() + ")"
                    break
        return text[:500]

    class _TestTimeout(BaseException):
        pass

    def on_alarm(signum, frame):
        raise _TestTimeout()

    sys.path.insert(0, os.getcwd())
    namespace = {"__name__": "hidden_tests", "__file__": spec["filename"]}
    setup_error = None
    try:
        exec(compile(source, spec["filename"], "exec"), namespace)
    except BaseException as exc:
        setup_error = "the tests could not be loaded: " + describe(exc)
    signal.signal(signal.SIGALRM, on_alarm)
    for name in names:
        if setup_error is not None:
            emit({"test": name, "passed": False, "message": setup_error})
            continue
        func = namespace.get(name)
        try:
            signal.setitimer(signal.ITIMER_REAL, per_test)
            try:
                func()
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
            passed, message = True, ""
        except _TestTimeout:
            passed, message = False, "timed out after %gs" % per_test
        except BaseException as exc:
            passed, message = False, describe(exc)
        emit({"test": name, "passed": passed, "message": message})
    emit({"done": True})
    sys.stdout.flush()
    os._exit(0)

_main()
"""


def parse_runner_output(output: str, nonce: str) -> dict[str, TestOutcome]:
    """Per-test outcomes from the lines that carry `nonce`; everything else is ignored."""
    prefix = f"{RESULT_MARK}{nonce} "
    outcomes: dict[str, TestOutcome] = {}
    for line in output.splitlines():
        if not line.startswith(prefix):
            continue
        try:
            record = json.loads(line[len(prefix) :])
        except ValueError:
            continue
        if isinstance(record, dict) and isinstance(record.get("test"), str):
            outcomes[record["test"]] = TestOutcome(
                name=record["test"],
                passed=record.get("passed") is True,
                message=str(record.get("message", "")),
            )
    return outcomes


# ---------------------------------------------------------------------------------------------
# Verification.


async def verify(
    task: Task,
    agent_files: Sandbox | Path,
    *,
    limits: SandboxLimits | None = None,
    config: VerifierConfig | None = None,
    turns_used: int | None = None,
    max_turns: int | None = None,
    root_dir: str | os.PathLike[str] | None = None,
) -> VerificationResult:
    """Run `task.hidden_tests` against the solution files found in `agent_files` (the agent's
    sandbox, still open, or a directory). Never raises (except for cancellation): anything that
    goes wrong, whoever caused it, scores 0 with the reason in the feedback."""
    config = config or VerifierConfig()
    try:
        return await _verify(task, agent_files, limits, config, (turns_used, max_turns), root_dir)
    except Exception as exc:  # noqa: BLE001 - a reward must never take the rollout (or group) down
        log.exception("verifier: internal failure for task %s; scored 0", task.task_id)
        reason = f"{type(exc).__name__}: {exc}"[:300]
        return VerificationResult(
            score=0.0,
            passed=0,
            total=_count_tests(task),
            output_tail="",
            feedback=f"The hidden tests could not be run (verifier error: {reason}); scored 0.",
        )


def _count_tests(task: Task) -> int:
    with contextlib.suppress(Exception):
        if isinstance(task.hidden_tests, str):
            return len(collect_tests(task.hidden_tests)[1])
        return len(parse_suite(task.hidden_tests).tests)
    return 1


async def _verify(
    task: Task,
    agent_files: Sandbox | Path,
    limits: SandboxLimits | None,
    config: VerifierConfig,
    turns: tuple[int | None, int | None],
    root_dir: str | os.PathLike[str] | None,
) -> VerificationResult:
    turns_used, max_turns = turns
    limits = limits or (agent_files.limits if isinstance(agent_files, Sandbox) else SandboxLimits())
    suite = None if isinstance(task.hidden_tests, str) else parse_suite(task.hidden_tests)
    if suite is not None:
        source, names = "", suite.names
    else:
        source, names = collect_tests(task.hidden_tests)
    if isinstance(agent_files, Sandbox):
        files, missing = await agent_files.offload(
            _collect_solution, task, Jail.of(agent_files), config.max_solution_bytes
        )
    else:
        files, missing = await asyncio.to_thread(
            _collect_from_directory, task, agent_files, config.max_solution_bytes
        )
    if not files:
        return _result(
            names, {}, config, missing=missing, timed_out=False, output_tail="", turns=(turns_used, max_turns)
        )

    run_limits = limits.model_copy(update={"max_output_bytes": max(limits.max_output_bytes, 1_000_000)})
    if suite is not None:
        outcomes, timed_out, output_tail = await _run_data_tests(suite, files, run_limits, config, root_dir)
        return _result(
            names,
            outcomes,
            config,
            missing=missing,
            timed_out=timed_out,
            output_tail=output_tail,
            turns=(turns_used, max_turns),
        )
    nonce = secrets.token_hex(16)
    spec = {
        "nonce": nonce,
        "source": source,
        "tests": names,
        "per_test_timeout_s": config.per_test_timeout_s,
        "show_source": config.show_assertion_source,
        "output_file": TEST_OUTPUT_FILE,
        "filename": HIDDEN_TESTS_FILENAME,
        "mark": RESULT_MARK,
    }
    async with Sandbox.create(run_limits, root_dir=root_dir) as sandbox:
        jail = Jail.of(sandbox)
        for name, data in files.items():
            await sandbox.offload(write_bytes, jail, name, data)
        command = f"exec {shlex.quote(config.python)} -I -c {shlex.quote(RUNNER)}"
        run = await sandbox.run(command, timeout_s=config.timeout_s, stdin=json.dumps(spec).encode())
        output_tail = ""
        if config.output_tail_chars:
            with contextlib.suppress(ToolError, OSError):
                data, _, _ = await sandbox.offload(
                    read_bytes, jail, TEST_OUTPUT_FILE, config.output_tail_chars * 4, tail=True
                )
                output_tail = data.decode("utf-8", errors="replace")[-config.output_tail_chars :]
    outcomes = parse_runner_output(run.output, nonce)
    if not outcomes and not run.timed_out:
        # The runner itself failed (e.g. no interpreter): show its own output.
        output_tail = (output_tail + "\n" + run.output).strip()[-max(config.output_tail_chars, 200) :]
    return _result(
        names,
        outcomes,
        config,
        missing=missing,
        timed_out=run.timed_out,
        output_tail=output_tail,
        turns=(turns_used, max_turns),
    )


async def _run_data_tests(
    suite: TestSuite,
    files: dict[str, bytes],
    limits: SandboxLimits,
    config: VerifierConfig,
    root_dir: str | os.PathLike[str] | None,
) -> tuple[dict[str, TestOutcome], bool, str]:
    """The tests in a fresh sandbox holding only the solution files: one process for the tests
    without a CPU budget, one more per test with one (`TestSuite.batches`); each test's report is
    judged here. Returns (outcomes, whether the run ran out of time, the end of the output)."""
    outcomes: dict[str, TestOutcome] = {}
    timed_out = False
    deadline = time.monotonic() + config.timeout_s
    command = f"exec {shlex.quote(config.python)} -I -c {shlex.quote(CHILD_SOURCE)}"
    output_tail = ""
    async with Sandbox.create(limits, root_dir=root_dir) as sandbox:
        jail = Jail.of(sandbox)
        for name, data in files.items():
            await sandbox.offload(write_bytes, jail, name, data)
        last_output = ""
        for batch in suite.batches():
            tests = [suite.tests[i] for i in batch]
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                timed_out = True
                for test in tests:
                    outcomes[test.name] = TestOutcome(test.name, False, "not run: the test run timed out")
                continue
            budget = config.per_test_timeout_s * len(batch)
            cut_short = remaining < budget
            only = tests[0] if len(tests) == 1 else None
            cpu = math.ceil(only.cpu_s) if only is not None and only.cpu_s is not None else None
            spec = {
                **suite.child_spec(batch),
                "output_file": TEST_OUTPUT_FILE,
                "per_test_timeout_s": config.per_test_timeout_s,
            }
            run = await sandbox.run(
                command, timeout_s=min(budget, remaining), stdin=json.dumps(spec).encode(), cpu_time_s=cpu
            )
            reports = _reports(run.output)
            for index, test in zip(batch, tests, strict=True):
                outcomes[test.name] = _judge_report(test, reports.get(index), run, cpu, config, cut_short)
            if run.timed_out and cut_short:
                timed_out = True
            last_output = run.output
        if config.output_tail_chars:
            with contextlib.suppress(ToolError, OSError):
                data, _, _ = await sandbox.offload(
                    read_bytes, jail, TEST_OUTPUT_FILE, config.output_tail_chars * 4, tail=True
                )
                output_tail = data.decode("utf-8", errors="replace")[-config.output_tail_chars :]
    if all(o.message.startswith("no result") for o in outcomes.values()) and outcomes:
        # The child never reported (e.g. no interpreter): show what it printed.
        output_tail = (output_tail + "\n" + last_output).strip()[-max(config.output_tail_chars, 200) :]
    return outcomes, timed_out, output_tail


def _reports(output: str) -> dict[int, object]:
    """{test index: parsed report} from the child's result lines; the last line per test counts,
    lines that are not strict JSON objects with an integer "test" are ignored."""
    reports: dict[int, object] = {}
    for line in output.splitlines():
        if not line.startswith(CHILD_RESULT_MARK):
            continue
        try:
            report = strict_json(line[len(CHILD_RESULT_MARK) :])
        except MalformedResult:
            continue
        if isinstance(report, dict) and type(report.get("test")) is int:
            reports[report["test"]] = report
    return reports


def _judge_report(test, report, run, cpu: int | None, config: VerifierConfig, cut_short: bool) -> TestOutcome:
    """Judge one test from its report, or say why there is none."""
    if report is None:
        if run.timed_out and cut_short:
            why = "no result: the test run was cut short (timed out)"
        elif run.timed_out or run.exit_code == TIMEOUT_EXIT_CODE:
            why = f"no result: timed out after {config.per_test_timeout_s:g}s"
        elif run.exit_code == 128 + signal.SIGXCPU or (
            cpu is not None and run.exit_code == 128 + signal.SIGKILL
        ):
            why = f"no result: exceeded its CPU budget ({cpu or 'default'} s)"
        else:
            why = f"no result: the test process ended without a report (exit status {run.exit_code})"
        return TestOutcome(test.name, False, why)
    passed, message = judge_test(test, report, show_source=config.show_assertion_source)
    return TestOutcome(test.name, passed, message)


def _collect_solution(task: Task, jail: Jail, max_bytes: int) -> tuple[dict[str, bytes], list[str]]:
    """{name: content} of the task's solution files that exist as plain files; and the missing ones."""
    files: dict[str, bytes] = {}
    missing: list[str] = []
    for name in task.solution_files:
        try:
            data, size, _ = read_bytes(jail, name, max_bytes + 1)
        except (ToolError, OSError):
            missing.append(name)
            continue
        if size > max_bytes:
            missing.append(name)
            continue
        files[name] = data
    return files, missing


def _collect_from_directory(
    task: Task, directory: Path, max_bytes: int
) -> tuple[dict[str, bytes], list[str]]:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        return _collect_solution(task, Jail(dir_fd=fd, root=Path(directory).resolve()), max_bytes)
    finally:
        os.close(fd)


def _result(
    names: list[str],
    outcomes: dict[str, TestOutcome],
    config: VerifierConfig,
    *,
    missing: list[str],
    timed_out: bool,
    output_tail: str,
    turns: tuple[int | None, int | None],
) -> VerificationResult:
    cut_short = "no result: the test run was cut short" + (" (timed out)" if timed_out else "")
    tests = [outcomes.get(name) or TestOutcome(name=name, passed=False, message=cut_short) for name in names]
    passed = sum(t.passed for t in tests)
    total = len(names)
    score = passed / total
    turns_used, max_turns = turns
    if config.efficiency_weight and turns_used is not None and max_turns:
        score *= 1.0 - config.efficiency_weight * min(1.0, turns_used / max_turns)
    return VerificationResult(
        score=score,
        passed=passed,
        total=total,
        output_tail=output_tail,
        feedback=_feedback(tests, passed, total, missing, timed_out, config),
        tests=tests,
        missing_files=missing,
        timed_out=timed_out,
    )


def _feedback(
    tests: list[TestOutcome],
    passed: int,
    total: int,
    missing: list[str],
    timed_out: bool,
    config: VerifierConfig,
) -> str:
    if passed == total:
        return ""
    lines = [f"{passed}/{total} hidden tests passed."]
    if missing:
        lines.append(
            "Missing solution file(s) (not found, not a regular file, a link out of the working directory, "
            "or too large): " + ", ".join(missing)
        )
    if timed_out:
        lines.append(f"The test run timed out after {config.timeout_s:g}s.")
    # Tests that failed for the same reason (e.g. an ImportError) are listed together.
    by_message: dict[str, list[str]] = {}
    for test in tests:
        if not test.passed:
            by_message.setdefault(test.message, []).append(test.name)
    lines.append("Failing tests:")
    text = "\n".join(lines)
    remaining = total - passed
    for message, group in by_message.items():
        entry = f"\n- {', '.join(group)}" + (f": {message}" if message else "")
        if len(text) + len(entry) > config.feedback_max_chars - 40:
            text += f"\n... and {remaining} more failing test(s)"
            break
        text += entry
        remaining -= len(group)
    return text[: config.feedback_max_chars]
