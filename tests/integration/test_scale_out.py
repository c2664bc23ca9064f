"""Scale-out on loopback: atroposlib's API server (`run-api`), two `AgenticOPDEnv` workers in `serve`
mode against the dev vLLM, and one consumer that registers as a trainer and pulls `/batch`.

Checks: both workers deliver; every group the API received comes out of `/batch` exactly once (the
API's own access log counts the POSTs); each group carries its distill fields and passes the
distill-format validator. Prints the measured throughput (docs/scaling.md quotes it)."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from hermes_opd.contract.constants import FORMAT_VERSION
from hermes_opd.learning_study.loop import start_logged
from hermes_opd.runtime.server_process import stop_process_group

REPO = Path(__file__).resolve().parents[2]
GROUP_SIZE = 2
TARGET_GROUPS = int(os.environ.get("HERMES_OPD_SCALE_OUT_GROUPS", "4"))
"""Groups to pull before stopping; raise it (e.g. 20) to measure steady-state throughput."""
COLLECT_TIMEOUT_S = 200 + 30 * max(0, TARGET_GROUPS - 4)


def _http(method: str, url: str, body: dict | None = None, timeout: float = 30) -> dict:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(
        url, data=data, method=method, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.loads(response.read())


def _fingerprint(group: dict) -> str:
    return hashlib.sha256(json.dumps(group["tokens"]).encode()).hexdigest()


def _worker_argv(dev_server, api_url: str, seed: int, tmp_path: Path) -> list[str]:
    """Worker 1 also reads configs/local-cpu.yaml (Atropos' --config), so the YAML is exercised in serve mode."""
    model_dir = str(dev_server.model_dir)
    config = ["--config", str(REPO / "configs" / "local-cpu.yaml")] if seed == 1 else []
    return [
        sys.executable,
        "-m",
        "environments.atropos.agentic_opd_env",
        "serve",
        *config,
        "--env.rollout_server_url",
        api_url,
        "--env.tokenizer_name",
        model_dir,
        "--env.group_size",
        str(GROUP_SIZE),
        "--env.max_turns",
        "2",
        "--env.max_tokens_per_turn",
        "128",
        "--env.max_num_workers",
        "1",  # one group in flight per worker: throughput per worker
        "--env.total_steps",
        "1000",
        "--env.steps_per_eval",
        "100000",
        "--env.use_wandb",
        "false",
        # atroposlib's serve CLI does not pass its wandb_name default into the env config, and
        # /register-env refuses desired_name=None (422); config_init leaves it None.
        "--env.wandb_name",
        "agentic-opd",
        "--env.seed",
        str(seed),
        "--env.metrics_path",
        os.devnull,
        # BaseEnv also writes every group it sends to this file (the YAML names one under runs/)
        "--env.data_path_to_save_groups",
        str(tmp_path / f"worker{seed}.jsonl"),
        "--openai.base_url",
        dev_server.base_url,
        "--openai.model_name",
        dev_server.model_name,
        "--openai.tokenizer_name",
        model_dir,
    ]


@pytest.mark.integration
def test_two_workers_feed_one_trainer_every_group_once(dev_server, own_run_api, tmp_path):
    from hermes_opd.contract.validation import validate_group

    api_url = own_run_api.url
    api_log = Path(own_run_api.log_path)  # its own log: the POSTs counted below are this test's
    procs: list[subprocess.Popen] = []
    received: list[dict] = []
    arrivals: dict[int, list[float]] = {}
    try:
        # The trainer registers first (atroposlib: envs wait until a trainer has asked for a batch).
        registration = {
            "wandb_group": "scale-out-test",
            "wandb_project": "hermes-opd",
            "batch_size": GROUP_SIZE,
            "max_token_len": 4096,
            "checkpoint_dir": str(tmp_path / "ckpt"),
            "save_checkpoint_interval": -1,
            "starting_step": 0,
            "num_steps": 1000,
        }
        assert "uuid" in _http("POST", f"{api_url}/register", registration)
        assert _http("GET", f"{api_url}/batch")["batch"] is None

        started = time.monotonic()
        for seed in (0, 1):
            log = tmp_path / f"worker{seed}.log"
            procs.append(start_logged(_worker_argv(dev_server, api_url, seed, tmp_path), log))
        deadline = started + COLLECT_TIMEOUT_S
        while time.monotonic() < deadline:
            for worker in procs:
                if worker.poll() is not None:
                    logs = "\n".join(p.read_text()[-2000:] for p in tmp_path.glob("worker*.log"))
                    pytest.fail(f"a worker exited with {worker.returncode}:\n{logs}")
            batch = _http("GET", f"{api_url}/batch")["batch"]
            if batch:
                received.extend(batch)
                for group in batch:
                    arrivals.setdefault(group.get("env_id"), []).append(time.monotonic() - started)
                env_ids = {g.get("env_id") for g in received}
                if len(received) >= TARGET_GROUPS and env_ids >= {0, 1}:
                    break
            else:
                time.sleep(0.5)
        else:
            logs = "\n".join(p.read_text()[-1500:] for p in tmp_path.glob("worker*.log"))
            pytest.fail(f"only {len(received)} group(s) in {COLLECT_TIMEOUT_S}s:\n{logs}")
        window_s = time.monotonic() - started

        for worker in procs:
            stop_process_group(worker, grace_s=15)
        # Drain what the workers posted before they stopped.
        while batch := _http("GET", f"{api_url}/batch")["batch"]:
            received.extend(batch)
        queued = _http("GET", f"{api_url}/status")["queue_size"]
        posted = len(re.findall(r'"POST /scored_data HTTP/1\.1" 200', api_log.read_text()))
    finally:
        for proc in reversed(procs):
            stop_process_group(proc, grace_s=15)

    fingerprints = [_fingerprint(g) for g in received]
    assert len(fingerprints) == len(set(fingerprints)), "a group came out of /batch twice"
    assert len(received) + queued == posted, f"posted {posted}, pulled {len(received)}, still queued {queued}"
    assert {g["env_id"] for g in received} >= {0, 1}, "both workers deliver"
    assert "/scored_data_list" not in api_log.read_text()
    scored_positions = 0
    for i, group in enumerate(received):
        assert len(group["tokens"]) == GROUP_SIZE
        assert group["distill_token_ids"] is not None and group["distill_logprobs"] is not None
        assert all(o["opd"]["format_version"] == FORMAT_VERSION for o in group["overrides"])
        assert validate_group(group, group_index=i) == []
        scored_positions += sum(1 for rows in group["distill_token_ids"] for row in rows if row)
    assert scored_positions > 0, "no teacher rows reached the trainer"

    rates = []
    for env_id, times in sorted(arrivals.items()):
        steady = 60 * (len(times) - 1) / (times[-1] - times[0]) if len(times) > 1 else float("nan")
        rates.append(
            f"worker {env_id}: {len(times)} groups, first at {times[0]:.0f}s, {steady:.2f} groups/min after it"
        )
    print(
        f"\nscale-out: {len(received)} groups of {GROUP_SIZE} pulled in {window_s:.0f}s from worker launch "
        f"({60 * len(received) / window_s:.2f} groups/min overall, startup included); " + "; ".join(rates)
    )
