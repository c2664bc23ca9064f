"""Collect here, train there, end to end on CPU with real parts only: `hermes-opd process` collects with
the dev vLLM (and `--send` feeds a real `run-api` while it writes), then `hermes-opd send` replays the
same file into a fresh `run-api` for the reference torch trainer (`hermes-opd train`'s entry point,
in a thread of this process so that its `train_step` can be watched): plainly, with the API
restarted mid-replay, and with the sender SIGKILLed and rerun.

Both sides are compared by content digests of the sequences: every sequence of the file is trained
exactly once, and no sequence twice.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from environments.delivery.send_cursor import cursor_path, load_cursor
from hermes_opd.devkit.run_api import RunApi
from tests.support.send_e2e import GROUP_SIZE, REPO, WatchedTrainer, file_digests, kill, send_argv, start
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

LOCAL_CPU = REPO / "configs" / "local-cpu.yaml"
GROUPS = 6


def acked(path: Path) -> int:
    with contextlib.suppress(Exception):
        return load_cursor(cursor_path(path)).groups_acked
    return 0


def wait_acked(path: Path, n: int, proc: subprocess.Popen, log: Path, timeout_s: float = 120) -> None:
    try:
        wait_until(
            lambda: acked(path) >= n,
            timeout_s,
            f"no {n} groups acknowledged",
            alive=lambda: proc.poll() is None,
        )
    except AssertionError as error:
        raise AssertionError(f"{error}: {log.read_text()[-3000:]}") from None


@pytest.fixture(scope="module")
def collected(dev_server, tmp_path_factory):
    """`hermes-opd process --send`: the file, and what the trainer fed by it trained on."""
    run = tmp_path_factory.mktemp("collect")
    out = run / "groups.jsonl"
    api = RunApi(log_path=str(run / "api.log")).start()
    try:
        trainer = WatchedTrainer(api.url, str(dev_server.model_dir), run, steps=GROUPS).start()
        model_dir = str(dev_server.model_dir)
        argv = [
            sys.executable,
            "-m",
            "hermes_opd.commands.main",
            "process",
            "--config",
            str(LOCAL_CPU),
            "--out",
            str(out),
            "--groups",
            str(GROUPS),
            "--concurrency",
            "2",
            "--progress",
            "lines",
            "--atropos-url",
            api.url,
            "--openai.base_url",
            dev_server.base_url,
            "--openai.model_name",
            dev_server.model_name,
            "--openai.tokenizer_name",
            model_dir,
            "--env.tokenizer_name",
            model_dir,
            "--env.group_size",
            str(GROUP_SIZE),
            "--env.max_turns",
            "2",
            "--env.max_tokens_per_turn",
            "128",
        ]
        log = run / "process.log"
        proc = start(argv, log)
        try:
            assert proc.wait(600) == 0, log.read_text()[-4000:]
        finally:
            kill(proc)
        assert trainer.join(300) == 0
    finally:
        api.stop()
    return out, trainer, log.read_text()


def test_process_send_feeds_the_trainer_every_sequence_once(collected):
    out, trainer, log = collected
    expected = file_digests(out)
    assert sum(expected.values()) == GROUPS * GROUP_SIZE
    assert trainer.trained == expected and trainer.dropped == 0
    assert f"send complete: {GROUPS} group(s), {GROUPS * GROUP_SIZE} sequences" in log, log[-3000:]


def replay(collected, tmp_path: Path, model_dir: str, disrupt) -> tuple[WatchedTrainer, str]:
    """`hermes-opd send` the collected file (a copy, so that its cursor is new) to a fresh API and
    trainer; `disrupt(path, proc, api, log)` may interfere; returns the trainer and the sender logs."""
    source, _, _ = collected
    path = tmp_path / "groups.jsonl"
    path.write_bytes(source.read_bytes())
    api = RunApi(log_path=str(tmp_path / "api.log")).start()
    log = tmp_path / "send.log"
    try:
        trainer = WatchedTrainer(api.url, model_dir, tmp_path, steps=GROUPS).start()
        proc = start(send_argv(path, api.url, "--max-rate", "1"), log)
        try:
            proc = disrupt(path, proc, api, log) or proc
            assert proc.wait(300) == 0, log.read_text()[-3000:]
        finally:
            kill(proc)
        assert trainer.join(300) == 0
    finally:
        api.stop()
    return trainer, log.read_text()


def test_send_replays_the_file_into_the_trainer_every_sequence_once(collected, tmp_path, dev_model_dir):
    trainer, log = replay(collected, tmp_path, str(dev_model_dir), lambda *args: None)
    assert trainer.trained == file_digests(collected[0]) and trainer.dropped == 0
    assert f"send complete: {GROUPS} group(s), {GROUPS * GROUP_SIZE} sequences" in log


def test_api_restart_mid_replay_loses_nothing_and_trains_nothing_twice(collected, tmp_path, dev_model_dir):
    def restart_api(path, proc, api, log):
        wait_acked(path, 3, proc, log)
        api.stop()
        time.sleep(1.0)
        api.start()

    trainer, log = replay(collected, tmp_path, str(dev_model_dir), restart_api)
    assert "the API went away or restarted 1 time(s)" in log, log[-3000:]
    assert trainer.trained == file_digests(collected[0])  # 0 lost, 0 trained twice
    print(f"API restart: {trainer.dropped} repeated group(s) dropped by hermes-opd train")


def test_sigkilled_sender_rerun_loses_nothing_and_resends_at_most_one_post(
    collected, tmp_path, dev_model_dir
):
    def kill_and_rerun(path, proc, api, log):
        wait_acked(path, 3, proc, log)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
        return start(send_argv(path, api.url, "--max-rate", "1"), log)

    trainer, log = replay(collected, tmp_path, str(dev_model_dir), kill_and_rerun)
    assert trainer.trained == file_digests(collected[0])  # 0 lost, 0 trained twice
    assert trainer.dropped <= 1  # at most the one POST acknowledged just before the kill
    assert "line(s) were sent by an earlier run" in log
    print(f"sender SIGKILL: {trainer.dropped} repeated group(s) dropped by hermes-opd train")
