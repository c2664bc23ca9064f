"""Verify many solutions, a few at a time: each written to a directory of its own and verified
in the real sandbox (`hermes-opd tasks score`, the HumanEval agreement bench).

A solution's file names are model output: each must follow environments/tasks/file_names.py and is
written through the same jail as the agent's tools (resolved inside the scratch directory, never
through a link out of it). A solution with a refused name, too many files or too many bytes scores
0 with the reason as every test's message; the other solutions are verified as usual.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from environments.rollout.tools import Jail, ToolError, write_bytes
from environments.rollout.verifier import TestOutcome, VerificationResult, VerifierConfig, verify
from environments.tasks.file_names import UnsafeFileName, checked_name
from environments.tasks.suites import parse_tests
from environments.tasks.task import Task
from hermes_opd.contract.errors import HermesOPDError

MAX_SOLUTION_FILES = 64
MAX_SOLUTION_BYTES = 16 * 1024 * 1024
"""All the files of one solution together (UTF-8)."""


class RefusedSolution(HermesOPDError, ValueError):
    """A solution that is not written at all; the message says why."""


def check_solution_files(files: Mapping[str, str]) -> None:
    """RefusedSolution unless every name follows the rule and the sizes fit."""
    if len(files) > MAX_SOLUTION_FILES:
        raise RefusedSolution(f"the solution has {len(files)} files; at most {MAX_SOLUTION_FILES}")
    total = 0
    for name, content in files.items():
        try:
            checked_name(name)
        except UnsafeFileName as exc:
            raise RefusedSolution(str(exc)) from None
        total += len(content.encode("utf-8", errors="surrogatepass"))
    if total > MAX_SOLUTION_BYTES:
        raise RefusedSolution(f"the solution has {total} bytes; at most {MAX_SOLUTION_BYTES}")


def write_solution(directory: Path, files: Mapping[str, str]) -> None:
    """Write `files` inside `directory` (which the caller made); RefusedSolution when one cannot be."""
    check_solution_files(files)
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        jail = Jail(dir_fd=fd, root=directory.resolve())
        for name, content in files.items():
            try:
                write_bytes(jail, name, content.encode("utf-8", errors="replace"))
            except (ToolError, OSError) as exc:
                raise RefusedSolution(f"file {name[:80]!r} could not be written: {exc}") from None
    finally:
        os.close(fd)


def refused_result(task: Task, reason: str) -> VerificationResult:
    """Score 0: every test failed with `reason` (nothing was run)."""
    try:
        names = parse_tests(task.hidden_tests).names
    except (TypeError, ValueError):
        names = ["tests"]
    tests = [TestOutcome(name, False, reason) for name in names]
    return VerificationResult(
        score=0.0, passed=0, total=len(tests), output_tail="", feedback=reason, tests=tests
    )


async def verify_solutions(
    samples: Sequence[tuple[Task, dict[str, str]]], config: VerifierConfig, workers: int
) -> list[tuple[VerificationResult, float]]:
    """Each (task, {filename: content})'s verdict and seconds, in input order; at most `workers`
    verifications at once."""
    gate = asyncio.Semaphore(max(1, workers))

    async def one(task: Task, files: dict[str, str]) -> tuple[VerificationResult, float]:
        async with gate:
            started = time.monotonic()
            with tempfile.TemporaryDirectory(prefix="hermes-score-") as tmp:
                try:
                    await asyncio.to_thread(write_solution, Path(tmp), files)
                except RefusedSolution as exc:
                    return refused_result(task, f"solution refused: {exc}"), time.monotonic() - started
                result = await verify(task, Path(tmp), config=config)
            return result, time.monotonic() - started

    return await asyncio.gather(*(one(task, files) for task, files in samples))
