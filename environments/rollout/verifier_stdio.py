"""stdin/stdout suites: each case's input is fed to the solution program in its sandbox, and its
stdout is compared here, in the trusted process, with the expected text
(environments/tasks/stdio_suite.py). The program never sees the expected output; all it can do
is print. Per case: the per-test wall limit, the sandbox's CPU and memory limits, a clear verdict
(accepted, wrong answer, runtime error, timed out, output too large).
"""

from __future__ import annotations

import os
import shlex
import time
from dataclasses import dataclass

from environments.rollout.sandbox.limits import SandboxLimits
from environments.rollout.sandbox.sandbox import Sandbox
from environments.rollout.sandbox_output import parse_off_loop
from environments.rollout.tools import Jail, write_bytes
from environments.tasks.stdio_suite import StdioCase, StdioSuite, normalise, outputs_match

STDERR_FILE = ".stdio-stderr"
"""Inside the sandbox: where the program's stderr goes (stdout alone is compared)."""


@dataclass(frozen=True)
class CaseVerdict:
    passed: bool
    message: str


def _first_difference(expected: str, actual: str) -> str:
    want, got = normalise(expected), normalise(actual)
    for i in range(max(len(want), len(got))):
        w = want[i] if i < len(want) else "<end of output>"
        g = got[i] if i < len(got) else "<end of output>"
        if w != g:
            return f"line {i + 1}: expected {w[:80]!r}, got {g[:80]!r}"
    return "outputs differ"


async def run_stdio_suite(
    suite: StdioSuite,
    files: dict[str, bytes],
    program: str,
    limits: SandboxLimits,
    *,
    python: str,
    per_test_timeout_s: float,
    timeout_s: float,
    root_dir: str | os.PathLike[str] | None = None,
) -> tuple[dict[str, CaseVerdict], bool]:
    """({case name: verdict}, whether the whole run ran out of time)."""
    verdicts: dict[str, CaseVerdict] = {}
    deadline = time.monotonic() + timeout_s
    timed_out = False
    command = f"exec {shlex.quote(python)} -I {shlex.quote(program)} 2>>{STDERR_FILE}"
    async with Sandbox.create(limits, root_dir=root_dir) as sandbox:
        jail = Jail.of(sandbox)
        for name, data in files.items():
            await sandbox.offload(write_bytes, jail, name, data)
        for case in suite.cases:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                timed_out = True
                verdicts[case.name] = CaseVerdict(False, "not run: the test run timed out")
                continue
            wall = min(per_test_timeout_s, remaining)
            run = await sandbox.run(command, timeout_s=wall, stdin=case.input.encode("utf-8"))
            verdicts[case.name] = await parse_off_loop(_judge, run, case, wall, suite.float_tol)
    return verdicts, timed_out


def _judge(run, case: StdioCase, wall_s: float, float_tol: float | None) -> CaseVerdict:
    """Compare in the trusted process: up to max_output_bytes of untrusted text (in a worker thread)."""
    if run.timed_out:
        return CaseVerdict(False, f"timed out after {wall_s:g}s")
    if run.truncated:
        return CaseVerdict(False, "output too large")
    if run.exit_code != 0:
        return CaseVerdict(False, f"runtime error (exit status {run.exit_code})")
    if outputs_match(case.output, run.output, float_tol):
        return CaseVerdict(True, "")
    return CaseVerdict(False, f"wrong answer ({_first_difference(case.output, run.output)})")
