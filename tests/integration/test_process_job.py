"""`hermes-opd process`: the output file (whole lines, torn tails, resume bookkeeping), the command
line's errors, and, against the real dev server, resume after SIGKILL and a clean Ctrl-C.
The tests of its parts that need no server: tests/unit/test_process_job.py."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.support.process_job import LOCAL_CPU, _job_argv, _records
from tests.support.send_e2e import kill, start

# -- the output file -----------------------------------------------------------------------------


# -- command-line errors (exit code 2, one clear line) --------------------------------------------


# -- against the real dev server -----------------------------------------------------------------


def _complete_lines(path: Path) -> int:
    return path.read_bytes().count(b"\n") if path.exists() else 0


def _wait_for_lines(proc: subprocess.Popen, path: Path, n: int, log: Path, timeout_s: float = 300) -> None:
    deadline = time.monotonic() + timeout_s
    while _complete_lines(path) < n:
        if proc.poll() is not None:
            pytest.fail(
                f"process exited with {proc.returncode} before writing {n} group(s):\n{log.read_text()[-3000:]}"
            )
        if time.monotonic() > deadline:
            pytest.fail(f"no {n} group(s) after {timeout_s}s:\n{log.read_text()[-3000:]}")
        time.sleep(0.2)


def _expected_task_ids(dev_server, groups: int) -> list[str]:
    """The env's own order: an env built from the same config (OPD off, and no server check: the
    order needs no server)."""
    import asyncio

    from environments.atropos.agentic_opd_env import AgenticOPDEnv
    from environments.atropos.config_loading import load_job_config, split_overrides

    overrides, _ = split_overrides(
        [
            "--env.tokenizer_name",
            str(dev_server.model_dir),
            "--env.opd_enabled",
            "false",
            "--env.data_path_to_save_groups",
            "null",
        ]  # BaseEnv would open (create) that file
    )
    job = load_job_config(LOCAL_CPU, overrides, env_cls=AgenticOPDEnv)
    env = AgenticOPDEnv(job.env, job.servers)
    env.check_servers_at_setup = False
    asyncio.run(env.setup())
    return [env.task_at(i).task_id for i in range(groups)]


@pytest.mark.integration
def test_resume_after_sigkill_has_no_duplicate_and_no_missing_group(dev_server, tmp_path):
    from hermes_opd.commands.validate import validate_jsonl

    groups = 4
    out = tmp_path / "groups.jsonl"
    log1, log2, log3 = tmp_path / "run1.log", tmp_path / "run2.log", tmp_path / "run3.log"
    proc = start(_job_argv(dev_server, out, groups, "--concurrency", "2"), log1)
    try:
        _wait_for_lines(proc, out, 1, log1)
        os.killpg(proc.pid, signal.SIGKILL)  # mid-run: a group in flight is lost, never half-written
        proc.wait(timeout=30)
    finally:
        kill(proc)
    first = _records(out)
    assert 1 <= len(first) < groups, log1.read_text()[-2000:]
    # what a kill in the middle of a write leaves: a torn last line
    with out.open("ab") as handle:
        handle.write(b'{"group_index":%d,"task_id":"torn","tokens":[[1,2,' % groups)

    proc = start(_job_argv(dev_server, out, groups, "--concurrency", "2"), log2)
    try:
        assert proc.wait(timeout=420) == 0, log2.read_text()[-3000:]
    finally:
        kill(proc)
    text = log2.read_text()
    assert "cut off a torn last line" in text
    assert f"{len(first)} already there, {groups - len(first)} new, 0 failed" in text

    records = _records(out)
    indices = [r["group_index"] for r in records]
    assert sorted(indices) == list(range(groups)), indices  # no duplicate, none missing
    assert records[: len(first)] == first  # what was there is untouched
    expected = _expected_task_ids(dev_server, groups)
    assert [r["task_id"] for r in sorted(records, key=lambda r: r["group_index"])] == expected
    for record in records:
        assert {o["task_id"] for o in record["overrides"]} == {record["task_id"]}
        assert len(record["tokens"]) == 2
    report = validate_jsonl(out)
    assert report.clean and report.groups == groups, report.to_dict()
    assert (tmp_path / "groups.metrics.jsonl").exists()

    # the same file under another task order is refused, and left alone
    before = out.read_bytes()
    proc = start(_job_argv(dev_server, out, groups + 1, "--env.seed", "7"), log3)
    try:
        assert proc.wait(timeout=300) == 2, log3.read_text()[-3000:]
    finally:
        kill(proc)
    assert "written with another task order" in log3.read_text()
    assert out.read_bytes() == before


@pytest.mark.integration
def test_ctrl_c_finishes_groups_in_flight_and_exits_cleanly(dev_server, tmp_path):
    from hermes_opd.commands.validate import validate_jsonl

    out = tmp_path / "groups.jsonl"
    log = tmp_path / "run.log"
    proc = start(_job_argv(dev_server, out, 20, "--concurrency", "2"), log)
    try:
        _wait_for_lines(proc, out, 1, log)
        os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C sends to the foreground process group
        code = proc.wait(timeout=240)
    finally:
        kill(proc)
    text = log.read_text()
    assert code == 130, text[-3000:]
    assert "SIGINT: finishing" in text or "SIGINT: stopping" in text
    assert "Traceback" not in text
    assert "process interrupted" in text and "rerun the same command to continue" in text
    assert out.read_bytes().endswith(b"\n")
    records = _records(out)
    indices = [r["group_index"] for r in records]
    assert len(indices) == len(set(indices)) >= 1
    assert f"{len(records)}/20 groups" in text  # every finished group is in the file
    report = validate_jsonl(out)
    assert report.clean, report.to_dict()
