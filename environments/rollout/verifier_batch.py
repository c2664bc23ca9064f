"""Verify many solutions, a few at a time: each written to a directory of its own and verified
in the real sandbox (`hermes-opd tasks score`, the HumanEval agreement bench)."""

from __future__ import annotations

import asyncio
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from environments.rollout.verifier import VerificationResult, VerifierConfig, verify
from environments.tasks.task import Task


def _write_files(directory: Path, files: dict[str, str]) -> None:
    for name, content in files.items():
        target = directory / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content, encoding="utf-8")


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
                _write_files(Path(tmp), files)
                result = await verify(task, Path(tmp), config=config)
            return result, time.monotonic() - started

    return await asyncio.gather(*(one(task, files) for task, files in samples))
