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
3. Code-style tests (the dataset's own test code: `check(candidate)`, `assert f(x) == y` lines,
   `test_*` functions) run in a trusted process of their own, in a second sandbox; the solution's
   functions are remote procedures that return plain values (environments/rollout/verifier_rpc.py).
4. stdin/stdout tests: the program's stdout for each input is compared here
   (environments/rollout/verifier_stdio.py).

The feedback describes public tests in detail and hidden tests only as a count
(environments/rollout/verifier_feedback.py); the score counts every test.

`verify()` never raises for anything the agent did, nor for an internal failure: those score 0,
with the reason in the feedback.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import os
import shlex
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from pydantic import BaseModel, ConfigDict, Field

from environments.rollout.sandbox.limits import TIMEOUT_EXIT_CODE, SandboxLimits
from environments.rollout.sandbox.sandbox import Sandbox
from environments.rollout.sandbox_output import parse_off_loop
from environments.rollout.tools import Jail, ToolError, read_bytes, write_bytes
from environments.rollout.verifier_feedback import FeedbackItem, choose_public, feedback_text
from environments.rollout.verifier_rpc import run_code_suite
from environments.rollout.verifier_stdio import run_stdio_suite
from environments.tasks.code_suite import CodeSuite
from environments.tasks.suite_child import RESULT_MARK as CHILD_RESULT_MARK
from environments.tasks.suite_format import (
    MalformedResult,
    TestSuite,
    judge_test,
    strict_json,
)
from environments.tasks.suites import parse_tests, public_test_names
from environments.tasks.task import Task

log = logging.getLogger(__name__)

TEST_OUTPUT_FILE = ".test-output"
"""Inside the verification sandbox: where the code under test's stdout/stderr goes."""
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
        description="Feedback on a failing PUBLIC test quotes its failing check. Hidden tests are only counted.",
    )
    public_fraction: float = Field(
        0.0,
        ge=0.0,
        le=1.0,
        description="Share of the tests a suite does not mark that are public anyway (a deterministic choice "
        "by task id and test name); their failures are described to the agent, answers included.",
    )
    feedback_max_chars: int = Field(2000, ge=100, description="Cap on the feedback text.")
    output_tail_chars: int = Field(2000, ge=0, description="How much of the end of the test output to keep.")


@dataclass(frozen=True)
class TestOutcome:
    name: str
    passed: bool
    message: str = ""
    """Why it failed, in detail (for logs and `hermes-opd tasks score`; the agent sees it only for a
    public test)."""
    public: bool = False


@dataclass(frozen=True)
class VerificationResult:
    score: float
    passed: int
    total: int
    output_tail: str
    """The end of what the code under test printed (stdout and stderr)."""
    feedback: str
    """For the agent: empty when every test passed; else the counts, and the failing public tests
    and why (truncated). Nothing of a hidden test but whether it passed."""
    tests: list[TestOutcome] = field(default_factory=list)
    missing_files: list[str] = field(default_factory=list)
    timed_out: bool = False

    @property
    def pass_fraction(self) -> float:
        return self.passed / self.total if self.total else 0.0


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
        return len(parse_tests(task.hidden_tests).names)
    return 1


async def _verify(
    task: Task,
    agent_files: Sandbox | Path,
    limits: SandboxLimits | None,
    config: VerifierConfig,
    turns: tuple[int | None, int | None],
    root_dir: str | os.PathLike[str] | None,
) -> VerificationResult:
    limits = limits or (agent_files.limits if isinstance(agent_files, Sandbox) else SandboxLimits())
    suite = parse_tests(task.hidden_tests)
    names = suite.names
    public = choose_public(task.task_id, names, public_test_names(suite), config.public_fraction)
    if isinstance(agent_files, Sandbox):
        files, missing = await agent_files.offload(
            _collect_solution, task, Jail.of(agent_files), config.max_solution_bytes
        )
    else:
        files, missing = await asyncio.to_thread(
            _collect_from_directory, task, agent_files, config.max_solution_bytes
        )
    outcomes: dict[str, TestOutcome] = {}
    timed_out, output_tail = False, ""
    run_limits = limits.model_copy(update={"max_output_bytes": max(limits.max_output_bytes, 1_000_000)})
    if not files:
        pass
    elif isinstance(suite, TestSuite):
        outcomes, timed_out, output_tail = await _run_data_tests(suite, files, run_limits, config, root_dir)
    elif isinstance(suite, CodeSuite):
        modules = [PurePosixPath(n).stem for n in task.solution_files if n.endswith(".py") and "/" not in n]
        verdicts, timed_out, output_tail = await run_code_suite(
            suite,
            files,
            modules or ["solution"],
            run_limits,
            python=config.python,
            per_test_timeout_s=config.per_test_timeout_s,
            timeout_s=config.timeout_s,
            output_file=TEST_OUTPUT_FILE,
            root_dir=root_dir,
            output_tail_chars=config.output_tail_chars,
        )
        outcomes = {n: TestOutcome(n, v.passed, v.message) for n, v in verdicts.items()}
    else:
        program = suite.program or task.solution_files[0]
        cases, timed_out = await run_stdio_suite(
            suite,
            files,
            program,
            run_limits,
            python=config.python,
            per_test_timeout_s=config.per_test_timeout_s,
            timeout_s=config.timeout_s,
            root_dir=root_dir,
        )
        outcomes = {n: TestOutcome(n, v.passed, v.message) for n, v in cases.items()}
    return _result(
        names,
        outcomes,
        public,
        config,
        missing=missing,
        timed_out=timed_out,
        output_tail=output_tail,
        turns=turns,
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
            # Untrusted text of up to max_output_bytes: parsed (within suite_format.SANDBOX_JSON) and
            # judged in a worker thread, so the event loop never waits on it.
            judged = await parse_off_loop(_judge_batch, run, tests, batch, cpu, config, cut_short)
            outcomes.update(judged)
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


def _judge_batch(run, tests, batch: list[int], cpu: int | None, config: VerifierConfig, cut_short: bool):
    """{test name: outcome} for one batch, from the child's output."""
    reports = _reports(run.output)
    return {
        test.name: _judge_report(test, reports.get(index), run, cpu, config, cut_short)
        for index, test in zip(batch, tests, strict=True)
    }


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
    if run.cpu_exceeded:
        report = None  # over its budget, all processes together: a report printed anyway is void
    if report is None:
        if run.timed_out and cut_short:
            why = "no result: the test run was cut short (timed out)"
        elif run.timed_out or run.exit_code == TIMEOUT_EXIT_CODE:
            why = f"no result: timed out after {config.per_test_timeout_s:g}s"
        elif run.cpu_exceeded:
            why = f"no result: exceeded its CPU budget ({cpu} s, all its processes together)"
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
    public: frozenset[str],
    config: VerifierConfig,
    *,
    missing: list[str],
    timed_out: bool,
    output_tail: str,
    turns: tuple[int | None, int | None],
) -> VerificationResult:
    cut_short = "no result: the test run was cut short" + (" (timed out)" if timed_out else "")
    tests = []
    for name in names:
        outcome = outcomes.get(name) or TestOutcome(name=name, passed=False, message=cut_short)
        tests.append(TestOutcome(name, outcome.passed, outcome.message, public=name in public))
    passed = sum(t.passed for t in tests)
    total = len(names)
    score = passed / total
    turns_used, max_turns = turns
    if config.efficiency_weight and turns_used is not None and max_turns:
        score *= 1.0 - config.efficiency_weight * min(1.0, turns_used / max_turns)
    feedback = feedback_text(
        [FeedbackItem(t.name, t.passed, t.message, t.public) for t in tests],
        missing=missing,
        timed_out_after_s=config.timeout_s if timed_out else None,
        max_chars=config.feedback_max_chars,
    )
    return VerificationResult(
        score=score,
        passed=passed,
        total=total,
        output_tail=output_tail,
        feedback=feedback,
        tests=tests,
        missing_files=missing,
        timed_out=timed_out,
    )
