"""Long waits say what they wait for, every few seconds: `hermes-opd send` against a real `run-api`
(no trainer registered; a registered trainer that does not pull, so the queue is full), and
`hermes-opd process` while no group has finished.
The tests of its parts that need no server: tests/unit/test_progress.py."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from hermes_opd.runtime.wait_notice import WAIT_NOTICE_S
from tests.support.groups import build_group, write_groups

REPO = Path(__file__).resolve().parents[2]
GROUP_SIZE = 2
REGISTRATION = {
    "wandb_group": "t",
    "wandb_project": "t",
    "batch_size": GROUP_SIZE,
    "max_token_len": 4096,
    "checkpoint_dir": "/tmp/unused",
    "save_checkpoint_interval": 0,
    "starting_step": 0,
    "num_steps": 10**6,
}


def notices_while_sending(path: Path, url: str, log: Path, pattern: str, count: int) -> list[str]:
    """Start `hermes-opd send`, wait until `count` lines match `pattern` (at most 90 s), stop it."""
    argv = [
        sys.executable,
        "-m",
        "hermes_opd.commands.main",
        "send",
        str(path),
        "--atropos-url",
        url,
        "--progress",
        "lines",
    ]
    with log.open("wb") as handle:
        proc = subprocess.Popen(
            argv, cwd=REPO, stdout=handle, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            lines = [line for line in log.read_text().splitlines() if re.search(pattern, line)]
            if len(lines) >= count:
                return lines
            assert proc.poll() is None, log.read_text()
            time.sleep(0.2)
        raise AssertionError(f"fewer than {count} lines match {pattern!r}:\n{log.read_text()}")
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)


def waited_seconds(lines: list[str]) -> list[int]:
    return [int(re.search(r"(?:waiting |\()(\d+) s(?![a-z])", line).group(1)) for line in lines]


def assert_every_notice_interval(seconds: list[int]) -> None:
    gaps = [b - a for a, b in zip(seconds, seconds[1:], strict=False)]
    # a notice at least every WAIT_NOTICE_S (5 s); a busy machine may add a poll or two
    assert all(WAIT_NOTICE_S - 1 <= gap <= WAIT_NOTICE_S + 2 for gap in gaps), seconds


@pytest.mark.reliability
def test_send_says_every_few_seconds_that_the_full_queue_waits_for_the_trainer(run_api, tmp_path):
    httpx.post(f"{run_api.url}/register", json=REGISTRATION, timeout=10).raise_for_status()  # never pulls
    path = tmp_path / "groups.jsonl"
    write_groups(path, [build_group(seed=s, group_size=GROUP_SIZE) for s in range(6)])
    lines = notices_while_sending(
        path, run_api.url, tmp_path / "send.log", "waiting for the trainer to pull", 3
    )
    expected = (
        "waiting for the trainer to pull: the API holds 2 batches of 2 sequences (4 sequences in 2 group(s); "
        "--max-queue-batches 2); 2 group(s) sent so far, waiting "
    )
    assert all(line.startswith(expected) for line in lines), lines
    assert_every_notice_interval(waited_seconds(lines))


@pytest.mark.reliability
def test_send_says_every_few_seconds_that_the_api_has_no_trainer_yet(run_api, tmp_path):
    path = tmp_path / "groups.jsonl"
    write_groups(path, [build_group(seed=0, group_size=GROUP_SIZE)])
    lines = notices_while_sending(path, run_api.url, tmp_path / "send.log", "waiting for a trainer", 3)
    expected = f"waiting for a trainer: the Atropos API at {run_api.url} has no registered trainer yet ("
    assert all(line.startswith(expected) for line in lines), lines
    assert_every_notice_interval(waited_seconds(lines))
