"""The Atropos CLI path, `python -m environments.atropos.agentic_opd_env serve|process|evaluate`, as a user
runs it: subprocesses against the real dev vLLM (and the real Atropos API for `serve`).

- `evaluate` prints a short table that matches the metrics file, writes no groups file, and writes
  atroposlib's eval log only when `data_dir_to_save_evals` is set;
- `serve`, `process` and `evaluate` end without `Unclosed client session`/`Unclosed connector`
  (the env's sessions are closed on a normal exit, on Ctrl-C and on an error);
- bad config, unknown keys and flags (with the closest name), an unreachable server and a wrong
  model name are one line on stderr each, with exit code 2;
- each role's server is checked at setup with its own error (policy down, judge down, teacher
  down), and one log line says which server serves which role.
The tests of its parts that need no server: tests/unit/test_atropos_cli.py."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from environments.atropos.eval_report import parse_eval_report
from hermes_opd.runtime.server_process import free_port
from hermes_opd.vllm_api.errors import ModelNotServedError, ServerUnreachableError
from tests.support.paths import LOCAL_CPU, REPO

UNCLOSED = "Unclosed"


def cli_env(dev_model_dir) -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "WANDB_MODE": "disabled",
        "PYTHONUNBUFFERED": "1",
        "HERMES_OPD_DEV_MODEL": str(dev_model_dir),
    }


def run_cli(args: list[str], cwd: Path, dev_model_dir, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "environments.atropos.agentic_opd_env", *args],
        cwd=cwd,
        env=cli_env(dev_model_dir),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def small_run(dev_server) -> list[str]:
    """Flags that keep a run short on 2 cores: 2 rollouts of at most 2 turns."""
    return [
        "--env.group_size",
        "2",
        "--env.max_turns",
        "2",
        "--env.max_tokens_per_turn",
        "96",
        "--openai.base_url",
        dev_server.base_url,
        "--openai.model_name",
        dev_server.model_name,
        "--openai.tokenizer_name",
        str(dev_server.model_dir),
    ]


def error_lines(stderr: str) -> list[str]:
    """stderr without the project's INFO log lines."""
    return [line for line in stderr.splitlines() if line.strip() and " INFO " not in line]


# -- evaluate --------------------------------------------------------------------------------------
@pytest.mark.integration
def test_evaluate_prints_a_table_that_matches_the_metrics_file(dev_server, dev_model_dir, tmp_path):
    started = time.monotonic()
    proc = run_cli(["evaluate", "--config", str(LOCAL_CPU), *small_run(dev_server)], tmp_path, dev_model_dir)
    wall_s = time.monotonic() - started
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert UNCLOSED not in proc.stderr, proc.stderr[-3000:]
    assert error_lines(proc.stderr) == [], proc.stderr[-3000:]
    # The table is all of stdout: atroposlib's config dump goes to the debug log.
    assert proc.stdout.splitlines()[0].startswith("evaluate: agentic-opd, 5 eval tasks, model dev-model at ")
    assert len(proc.stdout.splitlines()) == 6, proc.stdout
    table = parse_eval_report(proc.stdout)
    metrics_path = tmp_path / "runs" / "local-cpu" / "metrics.jsonl"  # next to the YAML's groups path
    records = [json.loads(line) for line in metrics_path.read_text().splitlines()]
    assert [r["kind"] for r in records] == ["eval"]
    record = records[0]
    assert table["pass@1"] == f"{record['eval/pass@1']:.3f}"
    assert table["mean score"] == f"{record['eval/mean_score']:.3f}"
    assert table["tasks"] == "5" and record["eval/tasks"] == 5.0
    assert table["metrics"] == 'runs/local-cpu/metrics.jsonl (the last line with "kind": "eval")'
    assert 0 < float(table["time"].removesuffix(" s")) < wall_s
    assert "eval log" not in table
    # No groups file (BaseEnv used to create an empty one), nothing else written.
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file()) == [
        "runs/local-cpu/metrics.jsonl"
    ]
    # The one log line naming each role's server, with the teacher's fallback.
    assert (
        f"servers by role: policy: {dev_server.base_url} (dev-model); judge: rules backend, offline (no "
        f"server); teacher: {dev_server.base_url} (dev-model), falls back to the policy server "
        "(teacher_base_url is not set)" in proc.stderr
    )


@pytest.mark.integration
def test_evaluate_with_an_eval_dir_writes_atroposlibs_eval_log_too(dev_server, dev_model_dir, tmp_path):
    args = [
        "evaluate",
        "--config",
        str(LOCAL_CPU),
        *small_run(dev_server),
        "--env.data_dir_to_save_evals",
        "evals",
        "--env.metrics_path",
        "m.jsonl",
    ]
    proc = run_cli(args, tmp_path, dev_model_dir)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert UNCLOSED not in proc.stderr
    table = parse_eval_report(proc.stdout)
    assert table["eval log"] == "evals/metrics.json"
    assert table["metrics"].startswith("m.jsonl ")
    eval_log = json.loads((tmp_path / "evals" / "metrics.json").read_text())
    record = json.loads((tmp_path / "m.jsonl").read_text().splitlines()[-1])
    assert eval_log["results"]["all"] == {k: v for k, v in record.items() if k.startswith("eval/")}
    assert table["pass@1"] == f"{eval_log['results']['all']['eval/pass@1']:.3f}"
    assert not list(tmp_path.rglob("groups*.jsonl"))


# -- process and serve: no unclosed sessions -------------------------------------------------------
@pytest.mark.integration
def test_process_under_atropos_cli_closes_its_sessions(dev_server, dev_model_dir, tmp_path):
    args = [
        "process",
        "--config",
        str(LOCAL_CPU),
        *small_run(dev_server),
        "--env.total_steps",
        "1",
        "--env.data_path_to_save_groups",
        "out/groups.jsonl",
    ]
    proc = run_cli(args, tmp_path, dev_model_dir)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert UNCLOSED not in proc.stderr, proc.stderr[-3000:]
    groups = [json.loads(line) for line in (tmp_path / "out" / "groups.jsonl").read_text().splitlines()]
    assert len(groups) == 1 and len(groups[0]["tokens"]) == 2


def _http(method: str, url: str, body: dict | None = None) -> dict:
    import urllib.request

    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(
        url, data=data, method=method, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


@contextlib.contextmanager
def atropos_api(run_api, tmp_path: Path, batch_size: int):
    """The session's `run-api` (emptied) with a trainer registered, as tests/integration/test_scale_out.py does."""
    url = run_api.url
    registration = {
        "wandb_group": "cli-test",
        "wandb_project": "hermes-opd",
        "batch_size": batch_size,
        "max_token_len": 4096,
        "checkpoint_dir": str(tmp_path / "ckpt"),
        "save_checkpoint_interval": -1,
        "starting_step": 0,
        "num_steps": 100,
    }
    assert "uuid" in _http("POST", f"{url}/register", registration)
    assert _http("GET", f"{url}/batch")["batch"] is None
    yield url


def serve_args(dev_server, api_url: str, total_steps: int) -> list[str]:
    return [
        "serve",
        "--config",
        str(LOCAL_CPU),
        *small_run(dev_server),
        "--env.rollout_server_url",
        api_url,
        "--env.total_steps",
        str(total_steps),
        "--env.steps_per_eval",
        "100000",
        "--env.max_num_workers",
        "1",
        "--env.wandb_name",
        "agentic-opd",
        "--env.data_path_to_save_groups",
        "served.jsonl",
        "--env.spool_dir",
        "spool",
    ]


@pytest.mark.integration
def test_serve_under_atropos_cli_closes_its_sessions_at_the_end(dev_server, run_api, dev_model_dir, tmp_path):
    # batch_size 2 = group_size: BaseEnv's serve loop ends once the queue holds more than total_steps
    # batches, here after 2 groups.
    with atropos_api(run_api, tmp_path, batch_size=2) as api_url:
        proc = run_cli(serve_args(dev_server, api_url, total_steps=1), tmp_path, dev_model_dir, timeout=300)
        queued = _http("GET", f"{api_url}/status")["queue_size"]
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert UNCLOSED not in proc.stderr, proc.stderr[-3000:]
    assert queued == 2
    assert len((tmp_path / "served.jsonl").read_text().splitlines()) == 2


@pytest.mark.integration
@pytest.mark.parametrize(
    ("sig", "code", "said"),
    [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "stopped by SIGTERM")],
    ids=["ctrl-c", "sigterm"],
)
def test_serve_stopped_mid_run_closes_its_sessions(
    dev_server, run_api, dev_model_dir, tmp_path, sig, code, said
):
    with atropos_api(run_api, tmp_path, batch_size=2) as api_url:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "environments.atropos.agentic_opd_env",
                *serve_args(dev_server, api_url, 1000),
            ],
            cwd=tmp_path,
            env={**cli_env(dev_model_dir), "PYTHONFAULTHANDLER": "1"},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            deadline = time.monotonic() + 240
            while _http("GET", f"{api_url}/status")["queue_size"] < 1:  # a group is in: mid-run
                assert proc.poll() is None, proc.communicate()[1][-3000:]
                assert time.monotonic() < deadline, "no group posted in 240 s"
                time.sleep(0.5)
            proc.send_signal(sig)
            try:  # the env's tasks get 30 s to stop (cli_lifecycle.STOP_TIMEOUT_S), then it closes
                _, stderr = proc.communicate(timeout=120)
            except subprocess.TimeoutExpired:
                proc.send_signal(signal.SIGABRT)  # faulthandler prints every thread's stack
                _, stderr = proc.communicate(timeout=30)
                pytest.fail(f"still running 120 s after {sig.name}; its threads:\n{stderr[-6000:]}")
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    assert proc.returncode == code, stderr[-3000:]
    assert UNCLOSED not in stderr, stderr[-3000:]
    assert f"agentic-opd serve: {said} (the env's connections are closed)" in stderr
    assert "Traceback" not in stderr, stderr[-3000:]


# -- one-line errors, exit code 2 ------------------------------------------------------------------
ONE_LINE_CASES = {
    "unknown YAML key": (
        "env:\n  group_sise: 4\n",
        [],
        "agentic-opd process: config error: {config}: env.group_sise: unknown key 'group_sise'; "
        "did you mean 'group_size'?",
    ),
    "not YAML": (
        "env:\n  group_size: [4\n",
        [],
        "agentic-opd process: config error: {config}: not valid YAML (line 3, column 1): expected ',' or ']', "
        "but got '<stream end>'",
    ),
    "bad value": (
        "env:\n  group_size: many\n",
        [],
        "agentic-opd process: config error: {config}: env.group_size: Input should be a valid integer, unable "
        "to parse string as an integer (got 'many')",
    ),
    "unknown flag key": (
        "",
        ["--env.max_turnz", "3"],
        "agentic-opd process: config error: --env.max_turnz: unknown key 'max_turnz'; did you mean 'max_turns'?",
    ),
    "unknown server key": (
        "",
        ["--openai.model", "x"],
        "agentic-opd process: config error: --openai.model: unknown key 'model'; did you mean 'model_name'?",
    ),
    "unknown flag": (
        "",
        ["--slurmm", "true"],
        "agentic-opd process: config error: unknown flag --slurmm; did you mean --slurm?",
    ),
}


@pytest.mark.reliability
@pytest.mark.parametrize("case", list(ONE_LINE_CASES))
def test_bad_config_is_one_line_with_exit_code_2(case, dev_model_dir, tmp_path):
    text, flags, expected = ONE_LINE_CASES[case]
    config = tmp_path / "job.yaml"
    config.write_text(text)
    proc = run_cli(["process", "--config", str(config), *flags], tmp_path, dev_model_dir, timeout=120)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert error_lines(proc.stderr) == [expected.format(config=config)], proc.stderr[-3000:]
    assert proc.stdout == ""
    assert list(tmp_path.iterdir()) == [config], "nothing written"


@pytest.mark.reliability
def test_a_task_setting_that_leaves_no_training_task_is_one_line(dev_model_dir, tmp_path):
    proc = run_cli(["evaluate", "--env.eval_fraction", "1.0"], tmp_path, dev_model_dir, timeout=120)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert error_lines(proc.stderr) == [
        "agentic-opd evaluate: config error: no training tasks left after holding out eval_fraction=1.0"
    ], proc.stderr[-3000:]
    assert list(tmp_path.iterdir()) == []


@pytest.mark.reliability
def test_unreachable_server_is_one_line_with_exit_code_2(dev_model_dir, tmp_path):
    url = f"http://127.0.0.1:{free_port()}/v1"
    proc = run_cli(
        ["evaluate", "--config", str(LOCAL_CPU), "--openai.base_url", url],
        tmp_path,
        dev_model_dir,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr[-3000:]
    lines = error_lines(proc.stderr)
    assert len(lines) == 1, proc.stderr[-3000:]
    assert lines[0].startswith(
        f"agentic-opd evaluate: ServerUnreachableError: the policy server at {url} (also the teacher server) "
        "is unreachable (ClientConnectorError: "
    )
    assert lines[0].endswith("start it, or fix openai.base_url")
    assert UNCLOSED not in proc.stderr


@pytest.mark.integration
def test_wrong_model_name_is_one_line_with_exit_code_2(dev_server, dev_model_dir, tmp_path):
    args = ["serve", "--config", str(LOCAL_CPU), *small_run(dev_server), "--openai.model_name", "qwen"]
    proc = run_cli(args, tmp_path, dev_model_dir, timeout=120)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert error_lines(proc.stderr) == [
        f"agentic-opd serve: ModelNotServedError: the policy server at {dev_server.base_url} does not serve "
        "model 'qwen'; it serves ['dev-model']. Set openai.model_name to one of those (or start vLLM with "
        "--served-model-name qwen)"
    ], proc.stderr[-3000:]
    assert UNCLOSED not in proc.stderr


# -- per-role server checks (in process) -----------------------------------------------------------
def env_for(base_url: str, model: str, model_dir, tmp_path, **overrides):
    from environments.atropos.agentic_opd_env import AgenticOPDEnv

    config, servers = AgenticOPDEnv.config_init()
    config.tokenizer_name = str(model_dir)
    config.metrics_path = str(tmp_path / "metrics.jsonl")
    for key, value in overrides.items():
        setattr(config, key, value)
    servers[0].base_url, servers[0].model_name = base_url, model
    servers[0].tokenizer_name = str(model_dir)
    return AgenticOPDEnv(config, servers)


@pytest.mark.reliability
async def test_policy_down_with_opd_on_names_the_policy_role_not_the_teacher_tokenizer(
    dev_model_dir, tmp_path
):
    url = f"http://127.0.0.1:{free_port()}/v1"
    env = env_for(url, "dev-model", dev_model_dir, tmp_path, opd_enabled=True, judge_backend="llm")
    started = time.monotonic()
    try:
        with pytest.raises(ServerUnreachableError) as raised:
            await asyncio.wait_for(env.setup(), 60)
    finally:
        await env.close()
    assert str(raised.value).startswith(
        f"the policy server at {url} (also the judge and teacher server) is unreachable (ClientConnectorError: "
    )
    assert time.monotonic() - started < 15
    assert env.pipeline is None


@pytest.mark.integration
@pytest.mark.parametrize("role", ["judge", "teacher"])
async def test_a_down_judge_or_teacher_names_its_own_role(dev_server, tmp_path, role, caplog):
    url = f"http://127.0.0.1:{free_port()}/v1"
    env = env_for(
        dev_server.base_url,
        dev_server.model_name,
        dev_server.model_dir,
        tmp_path,
        judge_backend="llm",
        **{f"{role}_base_url": url, f"{role}_model": "big"},
    )
    try:
        with caplog.at_level(logging.INFO), pytest.raises(ServerUnreachableError) as raised:
            await asyncio.wait_for(env.setup(), 60)
    finally:
        await env.close()
    setting = f"env.{role}_base_url"
    assert str(raised.value).startswith(f"the {role} server at {url} is unreachable (ClientConnectorError: ")
    assert str(raised.value).endswith(f"start it, or fix {setting}")
    other = "teacher" if role == "judge" else "judge"
    line = next(r.getMessage() for r in caplog.records if r.getMessage().startswith("servers by role: "))
    assert f"{role}: {url} (big);" in line + ";"
    assert (
        f"{other}: {dev_server.base_url} (dev-model), falls back to the policy server ({other}_base_url is not set)"
        in line
    )


@pytest.mark.integration
async def test_teacher_on_a_server_without_its_model_names_the_teacher(dev_server, tmp_path):
    env = env_for(
        dev_server.base_url,
        dev_server.model_name,
        dev_server.model_dir,
        tmp_path,
        teacher_base_url=dev_server.base_url,
        teacher_model="qwen-32b",
    )
    try:
        with pytest.raises(ModelNotServedError) as raised:
            await asyncio.wait_for(env.setup(), 60)
    finally:
        await env.close()
    assert str(raised.value) == (
        f"the teacher server at {dev_server.base_url} does not serve model 'qwen-32b'; it serves ['dev-model']. "
        "Set env.teacher_model to one of those (or start vLLM with --served-model-name qwen-32b)"
    )


@pytest.mark.integration
async def test_two_policy_servers_the_log_line_says_judge_and_teacher_use_the_first(
    dev_server, tmp_path, caplog
):
    from environments.atropos.agentic_opd_env import AgenticOPDEnv

    config, servers = AgenticOPDEnv.config_init()
    config.tokenizer_name = str(dev_server.model_dir)
    config.metrics_path = str(tmp_path / "metrics.jsonl")
    config.judge_backend = "llm"
    second = dev_server.base_url.rstrip("/") + "/"  # the same server under another URL string
    base = servers[0]
    base.base_url, base.model_name, base.tokenizer_name = (
        dev_server.base_url,
        "dev-model",
        str(dev_server.model_dir),
    )
    pair = [base, base.model_copy(update={"base_url": second})]
    env = AgenticOPDEnv(config, pair)
    try:
        with caplog.at_level(logging.INFO):
            await asyncio.wait_for(env.setup(), 120)
    finally:
        await env.close()
    line = next(r.getMessage() for r in caplog.records if r.getMessage().startswith("servers by role: "))
    first = dev_server.base_url
    assert line == (
        f"servers by role: policy 0: {first} (dev-model); policy 1: {second} (dev-model); "
        f"judge: {first} (dev-model), falls back to the first of the 2 policy servers (judge_base_url is not set); "
        f"teacher: {first} (dev-model), falls back to the first of the 2 policy servers (teacher_base_url is not set)"
    )
    # ... and that is what the pipeline uses.
    assert env.pipeline.teacher.client.base_url.rstrip("/") == first.rstrip("/")


# -- pure parts ------------------------------------------------------------------------------------
