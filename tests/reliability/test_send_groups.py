"""`hermes-opd send`: a groups file replayed into the real Atropos API (`run-api`), validated first,
resumable from its cursor after a SIGKILL of the sender or a restart of the API.

The trainer's side here is a thread that registers and pulls `/batch` the way a trainer does, and
passes every batch through the trainers' own `RepeatedGroupFilter`; tests/integration/test_send_e2e.py runs the
same scenarios with `hermes-opd process` and `hermes-opd train` themselves.
The tests of its parts that need no server: tests/unit/test_send_groups.py."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import httpx
import pytest

from environments.delivery.send_cursor import cursor_path, load_cursor
from hermes_opd.contract.group_id import group_id_of, with_group_id
from tests.support.groups import GROUP_SIZE, build_group, write_groups
from tests.support.waiting import wait_until
from trainer_adapters.repeated_groups import RepeatedGroupFilter

REPO = Path(__file__).resolve().parents[2]


# -- pure parts --------------------------------------------------------------------------------------


# -- against the real API ----------------------------------------------------------------------------
class PullingTrainer(threading.Thread):
    """Registers, pulls `/batch` every 20 ms, registers again after an API restart, and keeps what it
    trains on (repeats dropped by the trainers' own filter)."""

    def __init__(self, url: str, batch_size: int = GROUP_SIZE, max_token_len: int = 4096) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.registration = {
            "wandb_group": "t",
            "wandb_project": "t",
            "batch_size": batch_size,
            "max_token_len": max_token_len,
            "checkpoint_dir": "/tmp/unused",
            "save_checkpoint_interval": 0,
            "starting_step": 0,
            "num_steps": 10**6,
        }
        self.repeats = RepeatedGroupFilter()
        self.trained: list[str] = []
        self.stopping = threading.Event()
        self.registered = threading.Event()

    def run(self) -> None:
        with httpx.Client(base_url=self.url, timeout=10) as http:
            while not self.stopping.is_set():
                try:
                    if not self.registered.is_set():
                        http.post("/register", json=self.registration).raise_for_status()
                        self.registered.set()
                    body = http.get("/batch").json()
                except httpx.HTTPError:
                    self.registered.clear()
                    time.sleep(0.1)
                    continue
                if body.get("status") == "error":
                    self.registered.clear()
                    continue
                if body.get("batch"):
                    self.trained += [group_id_of(g) for g in self.repeats.new_groups(body["batch"])]
                else:
                    time.sleep(0.02)

    def stop(self) -> None:
        self.stopping.set()
        self.join(timeout=10)


@pytest.fixture
def trainer(own_run_api):
    puller = PullingTrainer(own_run_api.url)
    puller.start()
    assert puller.registered.wait(30)
    try:
        yield puller
    finally:
        puller.stop()


def send(path: Path, url: str, *extra: str, timeout: float = 120) -> subprocess.CompletedProcess:
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
        *extra,
    ]
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=REPO)


def start_send(path: Path, url: str, log: Path, *extra: str) -> subprocess.Popen:
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
        *extra,
    ]
    with log.open("wb") as handle:
        return subprocess.Popen(
            argv, cwd=REPO, stdout=handle, stderr=subprocess.STDOUT, start_new_session=True
        )


def acked(path: Path) -> int:
    try:
        return load_cursor(cursor_path(path)).groups_acked
    except Exception:  # noqa: BLE001 - the cursor may not exist yet
        return 0


def plant_positive_logprob(group: dict) -> str:
    seq = 1
    pos = next(p for p, row in enumerate(group["distill_logprobs"][seq]) if row)
    group["distill_logprobs"][seq][pos][0] = 0.5
    return "positive_logprob"


def plant_row_at_masked_position(group: dict) -> str:
    seq = 0
    pos = next(p for p, m in enumerate(group["masks"][seq]) if m == -100)
    group["distill_token_ids"][seq][pos] = [group["tokens"][seq][pos]]
    group["distill_logprobs"][seq][pos] = [-0.1]
    return "row_at_masked_position"


@pytest.mark.reliability
@pytest.mark.parametrize("plant", [plant_positive_logprob, plant_row_at_masked_position])
def test_an_invalid_group_stops_the_send_before_anything_is_sent_and_skip_invalid_sends_the_rest(
    own_run_api, trainer, tmp_path, plant
):
    groups = [build_group(seed=s, group_size=GROUP_SIZE) for s in range(6)]
    kind = plant(groups[2])
    path = tmp_path / "groups.jsonl"
    ids = write_groups(path, groups)

    first = send(path, own_run_api.url)
    # The file is validated before the API is contacted (issue 31): a bad line, and nothing is sent.
    assert first.returncode == 2, first.stderr
    assert f"groups.jsonl: line 3: [{kind}]" in first.stderr, first.stderr
    assert "1 line(s) of " in first.stderr and "nothing was sent" in first.stderr
    time.sleep(0.5)
    assert trainer.trained == [] and load_cursor(cursor_path(path)).acked_lines == 0

    second = send(path, own_run_api.url, "--skip-invalid")
    assert second.returncode == 0, second.stdout + second.stderr
    assert "1 invalid group(s) skipped:" in second.stdout and f"line 3: [{kind}]" in second.stdout
    wait_until(lambda: len(trainer.trained) == 5, 30, "the valid groups did not arrive")
    assert Counter(trainer.trained) == Counter(ids[:2] + ids[3:]) and trainer.repeats.dropped == 0


@pytest.mark.reliability
def test_a_sequence_longer_than_the_trainers_max_token_len_is_refused_by_line(run_api, tmp_path):
    puller = PullingTrainer(run_api.url, max_token_len=40)
    puller.start()
    try:
        assert puller.registered.wait(30)
        groups = [build_group(seed=s, group_size=GROUP_SIZE) for s in range(2)]
        longest = max(len(seq) for seq in groups[0]["tokens"])
        path = tmp_path / "groups.jsonl"
        write_groups(path, groups)
        result = send(path, run_api.url)
    finally:
        puller.stop()
    assert result.returncode == 1
    assert (
        f"line 1: a sequence has {longest} tokens, more than the trainer's max_token_len=40" in result.stdout
    )


@pytest.mark.reliability
def test_sigkill_of_the_sender_then_a_rerun_loses_nothing_and_resends_at_most_one_post(
    own_run_api, trainer, tmp_path
):
    groups = [build_group(seed=s, group_size=GROUP_SIZE) for s in range(24)]
    path = tmp_path / "groups.jsonl"
    ids = write_groups(path, groups)
    proc = start_send(path, own_run_api.url, tmp_path / "send1.log", "--max-rate", "8")
    try:
        wait_until(lambda: acked(path) >= 6, 60, "the sender acknowledged no 6 groups")
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)
    assert acked(path) < len(groups)
    rerun = send(path, own_run_api.url)
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    wait_until(lambda: len(trainer.trained) == len(groups), 30, "not every group reached the trainer")
    time.sleep(0.5)
    assert sorted(trainer.trained) == sorted(ids)  # none lost, none trained twice
    assert trainer.repeats.dropped <= 1  # at most the one POST whose cursor write the kill prevented
    assert httpx.get(own_run_api.url + "/status").json()["queue_size"] == 0


@pytest.mark.reliability
def test_an_api_restart_mid_replay_loses_nothing_and_the_trainer_drops_the_repeats(
    own_run_api, trainer, tmp_path
):
    groups = [build_group(seed=s, group_size=GROUP_SIZE) for s in range(24)]
    path = tmp_path / "groups.jsonl"
    ids = write_groups(path, groups)
    proc = start_send(path, own_run_api.url, tmp_path / "send.log", "--max-rate", "8")
    try:
        wait_until(lambda: acked(path) >= 8, 60, "the sender acknowledged no 8 groups")
        own_run_api.stop()  # whatever its queue held is gone
        time.sleep(1.0)
        own_run_api.start()
        assert proc.wait(120) == 0, (tmp_path / "send.log").read_text()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)
    log = (tmp_path / "send.log").read_text()
    assert "the API went away or restarted 1 time(s)" in log, log
    wait_until(lambda: len(set(trainer.trained)) == len(groups), 30, "not every group reached the trainer")
    time.sleep(0.5)
    assert Counter(trainer.trained) == Counter(ids)  # none lost, none trained twice
    print(f"API restart: {trainer.repeats.dropped} repeated group(s) dropped by the trainer")


@pytest.mark.reliability
def test_a_cursor_of_a_changed_file_is_refused(own_run_api, trainer, tmp_path):
    groups = [build_group(seed=s, group_size=GROUP_SIZE) for s in range(3)]
    path = tmp_path / "groups.jsonl"
    write_groups(path, groups)
    assert send(path, own_run_api.url).returncode == 0
    write_groups(path, [build_group(seed=s + 10, group_size=GROUP_SIZE) for s in range(4)])
    result = send(path, own_run_api.url)
    assert result.returncode == 2
    assert "is not the group" in result.stderr and "the file changed" in result.stderr


@pytest.mark.reliability
def test_send_bench_quick_reports_throughput_and_api_memory_per_mode(tmp_path, capsys):
    from hermes_opd.bench import cli

    path = tmp_path / "groups.jsonl"
    write_groups(path, [build_group(seed=s, group_size=GROUP_SIZE) for s in range(3)])
    assert cli.main(["send", "--groups", str(path), "--quick", "--json"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["groups"] == 10 * 4 // GROUP_SIZE and result["batch_size"] == 4
    for mode in ("throughput", "unpaced", "max_rate", "queue_bound"):
        measured = result[mode]
        assert measured["groups"] == result["groups"], mode  # every group of the file, once per mode
        assert (
            measured["groups_per_s"] > 0 and measured["api_rss_peak_mib"] >= measured["api_rss_idle_mib"] > 0
        )
    assert list(result)[-1] == "unpaced_over_queue_bound_rss_growth"


@pytest.mark.reliability
def test_the_trainers_client_registers_again_with_a_restarted_api(own_run_api):
    from trainer_adapters.atropos_client import AtroposClient, Backoff, Registration

    registration = Registration("t", "t", GROUP_SIZE, 4096, "/tmp/unused", 0, 0, 10)
    with AtroposClient(own_run_api.url, backoff=Backoff(initial_s=0.05, maximum_s=0.2)) as client:
        client.register(registration)
        own_run_api.stop()
        own_run_api.start()  # has forgotten the trainer: /batch answers "Trainer not registered"
        assert httpx.get(own_run_api.url + "/info").json()["batch_size"] == -1
        sender = threading.Thread(
            target=lambda: (
                wait_until(
                    lambda: httpx.get(own_run_api.url + "/info").json()["batch_size"] == GROUP_SIZE, 30, "no"
                ),
                httpx.post(
                    own_run_api.url + "/scored_data",
                    json=with_group_id(build_group(seed=1, group_size=GROUP_SIZE)),
                ),
            )
        )
        sender.start()
        batch = client.wait_for_batch(timeout_s=60)
        sender.join(30)
    assert len(batch) == 1 and group_id_of(batch[0]) is not None
