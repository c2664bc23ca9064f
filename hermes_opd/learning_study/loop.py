"""One run of the closed online loop, for `hermes-opd bench learning` (docs/notes/learning-lab.md, "The loop").

Real processes only: atroposlib's `run-api`, one or more `AgenticOPDEnv` `serve` workers, and
`hermes-opd train` (the torch trainer, LoRA), against one vLLM that serves the policy, the teacher
and every adapter the trainer loads (`--enable-lora`, VLLM_ALLOW_RUNTIME_LORA_UPDATING=1). After
every optimizer step the trainer loads `<prefix>-step<N>` into that vLLM; the env samples and
scores with the newest one. Held-out success comes from the env's own `evaluate`, run in-process by
the bench on the start policy and, after the run, on the trainer's saved weights after every
`eval_every`-th step and the last (`evaluation_steps`): each is loaded into the same vLLM as its own
adapter and evaluated alone, so every seed and arm is evaluated at exactly the same steps and no
evaluation pauses the sampling. Every process is started in its own session and stopped by its PID.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import logging
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml

from environments.tasks.convention_choice import ConventionChoice, choice_summary
from hermes_opd.contract.errors import HermesOPDError
from hermes_opd.contract.policy_version import POLICY_VERSION_KEY, adapter_name, adapter_step
from hermes_opd.devkit.dev_server import DevServer
from hermes_opd.devkit.run_api import RunApi
from hermes_opd.learning_study.probe import probe_run
from hermes_opd.learning_study.report import ARMS, RunRecords
from hermes_opd.runtime.server_process import free_port, start_process_group, stop_process_group
from hermes_opd.runtime.wait_notice import WAIT_NOTICE_S
from trainer_adapters.weight_sync import WeightSyncError, load_lora_adapter, unload_lora_adapter

logger = logging.getLogger(__name__)

REPO = Path(__file__).resolve().parents[2]


class LearningRunError(HermesOPDError, RuntimeError):
    """A process of the loop failed or the run did not finish in time."""


@dataclass
class LoopSettings:
    model_dir: str
    """The student (policy) model directory; the trainer trains a LoRA on it."""
    served_model: str
    vllm_root_url: str
    """vLLM's root URL (no /v1): adapters are loaded at {root}/v1/load_lora_adapter."""
    out_dir: Path
    steps: int
    groups_per_step: int
    group_size: int
    eval_every: int
    workers: int = 1
    lora_r: int = 8
    lr: float = 1e-3
    run_timeout_s: float = 1800.0
    env: dict[str, Any] = field(default_factory=dict)
    """Extra `env:` keys of every worker (task set, turns, judge, ...), from the bench config."""
    trainer: dict[str, Any] = field(default_factory=dict)
    """Extra trainer keys, deep-merged into the generated trainer config."""

    @property
    def generations_per_step(self) -> int:
        return self.groups_per_step * self.group_size

    @classmethod
    def from_values(
        cls, values: dict[str, Any], model_dir: str, out_dir: Path, env_defaults: dict[str, Any]
    ) -> LoopSettings:
        """The settings a bench's resolved config `values` give (its `env:` over `env_defaults`)."""
        return cls(
            model_dir=model_dir,
            served_model=str(values.get("served_model") or "dev-model"),
            vllm_root_url=str(values.get("vllm_url") or "").rstrip("/"),
            out_dir=out_dir,
            steps=int(values["steps"]),
            groups_per_step=int(values["groups_per_step"]),
            group_size=int(values["group_size"]),
            eval_every=int(values["eval_every"]),
            workers=int(values.get("workers") or 1),
            lora_r=int(values["lora_r"]),
            lr=float(values["lr"]),
            run_timeout_s=float(values["run_timeout_s"]),
            env={**env_defaults, **(values.get("env") or {})},
            trainer=dict(values.get("trainer") or {}),
        )


def deep_merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for key, value in extra.items():
        out[key] = (
            deep_merge(out[key], value)
            if isinstance(value, dict) and isinstance(out.get(key), dict)
            else value
        )
    return out


def start_lora_vllm(
    model_dir: str,
    lora_r: int,
    log_path: Path,
    served_model: str = "dev-model",
    on_wait: Callable[[str], None] | None = None,
) -> DevServer:
    """A CPU vLLM that can hot-load LoRA adapters of rank <= `lora_r` (vllm-on-cpu notes, last
    section); `on_wait` is told what the start waits for, every few seconds."""
    os.environ["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] = "1"  # DevServer passes our environment on
    server = DevServer(
        model_dir,
        served_model_name=served_model,
        log_path=str(log_path),
        extra_args=[
            "--enable-lora",
            "--max-lora-rank",
            str(lora_r),
            "--max-loras",
            "4",
            "--max-cpu-loras",
            "8",
        ],
        on_wait=on_wait,
    )
    return server.start()


# -- processes --------------------------------------------------------------------------------------
def start_logged(argv: list[str], log: Path) -> subprocess.Popen:
    """Start `argv` in the repository, offline, in its own session, its output to `log`."""
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "PYTHONUNBUFFERED": "1",
        "WANDB_MODE": "disabled",
    }
    return start_process_group(argv, log, env=env, cwd=REPO, append=False)


def start_with_config(module: list[str], document: dict, config_path: Path, log: Path) -> subprocess.Popen:
    """Write `document` as YAML to `config_path` and start `python -m <module...> --config <it>`
    (start_logged), its output to `log`."""
    config_path.write_text(yaml.safe_dump(document))
    return start_logged([sys.executable, "-m", *module, "--config", str(config_path)], log)


def start_run_api(run_dir: Path, port: int) -> RunApi:
    """atroposlib's `run-api` for one run, on `port`, its log in `run_dir/api.log`."""
    return RunApi(port=port, log_path=str(run_dir / "api.log"), startup_timeout_s=90).start()


def start_trainer(document: dict, run_dir: Path) -> subprocess.Popen:
    """`hermes-opd train` for one run: `document` as `run_dir/trainer.yaml`, its log `trainer.log`."""
    return start_with_config(
        ["trainer_adapters.train_cli"], document, run_dir / "trainer.yaml", run_dir / "trainer.log"
    )


def check_trainer_exit(trainer: subprocess.Popen, run_dir: Path) -> None:
    """Raise LearningRunError with the log's tail when a finished trainer did not exit 0."""
    if trainer.returncode != 0:
        raise LearningRunError(
            f"trainer exited with {trainer.returncode}: {(run_dir / 'trainer.log').read_text()[-2000:]}"
        )


def stop_all(procs: list[subprocess.Popen]) -> None:
    """Stop a run's processes by PID, the last started first."""
    for proc in reversed(procs):
        stop_process_group(proc)


def _http_json(method: str, url: str, body: dict | None = None, timeout: float = 30) -> Any:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(
        url, data=data, method=method, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.loads(response.read() or b"null")


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    records = []
    for line in path.read_text().splitlines():
        with contextlib.suppress(json.JSONDecodeError):
            records.append(json.loads(line))
    return records


def unload_adapters(vllm_root_url: str, prefix: str) -> list[str]:
    """Unload every adapter of `prefix` still on the server (a finished run's last ones); returns
    their names."""
    try:
        served = [m["id"] for m in _http_json("GET", f"{vllm_root_url}/v1/models")["data"]]
    except (urllib.error.URLError, OSError, ValueError, KeyError, TypeError) as exc:
        logger.warning("could not list the adapters on %s: %s", vllm_root_url, exc)
        return []
    with httpx.Client(timeout=60) as http:
        return [
            name
            for name in served
            if adapter_step(prefix, name) is not None and unload_lora_adapter(http, vllm_root_url, name)
        ]


# -- configs ----------------------------------------------------------------------------------------
def env_document(
    settings: LoopSettings, *, seed: int, prefix: str | None, metrics_path: Path
) -> dict[str, Any]:
    env = {
        "group_size": settings.group_size,
        "seed": seed,
        "policy_lora_prefix": prefix,
        "steps_per_eval": 0,  # the serve loop never evaluates: the bench evaluates saved weights
        "total_steps": 100000,
        "tokenizer_name": settings.model_dir,
        "use_wandb": False,
        "wandb_name": "agentic-opd",
        "metrics_path": str(metrics_path),
        "max_num_workers": settings.groups_per_step,
        "judge_backend": "rules",
        # bounded staleness with the trainer's atropos.max_policy_lag (default 1): the env stops
        # sampling while the queue holds one batch (Atropos' default 3 let the lag reach 5)
        "max_batches_offpolicy": 1,
        **settings.env,
    }
    openai = {
        "base_url": f"{settings.vllm_root_url}/v1",
        "model_name": settings.served_model,
        "api_key": "EMPTY",
        "server_type": "vllm",
        "tokenizer_name": settings.model_dir,
        "timeout": 300,
    }
    return {"env": env, "openai": openai}


def trainer_document(
    settings: LoopSettings, *, arm: str, seed: int, prefix: str, run_dir: Path, api_url: str
) -> dict:
    w_grpo, w_opd = ARMS[arm]
    base = {
        "trainer": "torch",
        "num_steps": settings.steps,
        "seed": seed,
        "atropos": {
            "url": api_url,
            "batch_size": settings.generations_per_step,
            "max_token_len": 4096,
            "poll_initial_s": 0.2,
            "poll_max_s": 1.0,
            "poll_timeout_s": settings.run_timeout_s,
        },
        "model": {
            "path": settings.model_dir,
            "lora": {
                "enabled": True,
                "r": settings.lora_r,
                "alpha": 2.0 * settings.lora_r,
                "target_modules": "all-linear",
            },
        },
        "optim": {"lr": settings.lr, "micro_batch_size": 8},
        "loss": {"w_grpo": w_grpo, "w_opd": w_opd},
        "checkpoint": {
            "dir": str(run_dir / "checkpoints"),
            "every_steps": 0,
            "keep_last": 3,
            "keep_every": settings.eval_every,  # the weights the bench evaluates after the run
            "resume": False,
        },
        "logging": {"metrics_path": str(run_dir / "trainer.jsonl"), "stdout": False},
        "weight_sync": {
            "mode": "vllm_lora",
            "vllm_url": settings.vllm_root_url,
            "lora_name": prefix,
            "lora_naming": "per_step",
            "keep_adapters": 3,
            "timeout_s": 120,
        },
    }
    return deep_merge(base, settings.trainer)


# -- evaluation through the env's own evaluate ------------------------------------------------------
async def _evaluate(document: dict[str, Any]) -> dict[str, float]:
    from environments.atropos.agentic_opd_env import AgenticOPDEnv
    from environments.atropos.config_loading import build_job_config

    job = build_job_config(document, env_cls=AgenticOPDEnv)
    env = AgenticOPDEnv(job.env, job.servers, slurm=False, testing=False)
    try:
        await env.setup()
        return await env.evaluate()
    finally:
        await env.close()


def evaluate_policy(
    settings: LoopSettings, *, seed: int, prefix: str | None, metrics_path: Path
) -> dict[str, Any]:
    """`AgenticOPDEnv.evaluate` on the held-out split with the newest adapter of `prefix` (the base
    model when None); OPD is off here (evaluation needs no teacher)."""
    document = env_document(settings, seed=seed, prefix=prefix, metrics_path=metrics_path)
    document["env"]["opd_enabled"] = False
    metrics = asyncio.run(_evaluate(document))
    return {
        **metrics,
        POLICY_VERSION_KEY: int(metrics["eval/policy_version"]),
        "by": "bench",
        **last_eval_choices(metrics_path),
    }


def last_eval_choices(metrics_path: Path) -> dict[str, Any]:
    """`{"conventions": per-kind summary}` of the last evaluation in `metrics_path` (the env writes
    which convention each attempt followed, environments/tasks/convention_choice.py), or {} when it
    wrote none (tasks of another family)."""
    lines = [r for r in read_jsonl(metrics_path) if r.get("kind") == "eval_choices"]
    if not lines:
        return {}
    choices = [ConventionChoice(**c) for c in lines[-1]["choices"]]
    return {"conventions": choice_summary(choices)}


def evaluation_steps(steps: int, eval_every: int) -> list[int]:
    """The trainer steps whose weights the bench evaluates: every multiple of `eval_every`, and the last."""
    return sorted({*range(eval_every, steps + 1, eval_every), steps})


def evaluate_checkpoint(
    settings: LoopSettings, *, seed: int, prefix: str, step: int, checkpoint: Path, metrics_path: Path
) -> dict[str, Any]:
    """`evaluate_policy` on the trainer's weights after `step` (`checkpoint`, a PEFT adapter directory),
    loaded as the only adapter of `<prefix>-eval` and unloaded afterwards."""
    if not (checkpoint / "adapter_config.json").is_file():
        raise LearningRunError(
            f"no adapter to evaluate for step {step}: {checkpoint} has no adapter_config.json"
        )
    eval_prefix = f"{prefix}-eval"
    name = adapter_name(eval_prefix, step)
    root = settings.vllm_root_url
    started = time.monotonic()
    with httpx.Client(timeout=120) as http:
        try:
            load_lora_adapter(http, root, name, checkpoint.resolve())
        except WeightSyncError as exc:
            raise LearningRunError(str(exc)) from exc
        try:
            result = evaluate_policy(settings, seed=seed, prefix=eval_prefix, metrics_path=metrics_path)
        finally:  # an unload that fails is logged: the evaluation's own error, if any, is the one raised
            unload_lora_adapter(http, root, name)
    if result[POLICY_VERSION_KEY] != step:
        raise LearningRunError(
            f"the evaluation of step {step} ran on policy version {result[POLICY_VERSION_KEY]}"
        )
    return {**result, "eval_s": round(time.monotonic() - started, 2)}


# -- one run ----------------------------------------------------------------------------------------
def load_run(run_dir: Path) -> RunRecords:
    """A finished run's records from its directory (`run.json`, `trainer.jsonl`, `env.jsonl`), so
    `--report-only` can rebuild the outputs of runs that finished before an interruption."""
    summary = json.loads((run_dir / "run.json").read_text())
    env_records = read_jsonl(run_dir / "env.jsonl")
    if "evals" in summary:  # evaluated after the run, at evaluation_steps
        later_evals = summary["evals"]
    else:  # a run of an earlier version of the bench: the serve loop's evaluations, then the end
        later_evals = [
            {**r, POLICY_VERSION_KEY: int(r["eval/policy_version"]), "by": "env"}
            for r in env_records
            if r.get("kind") == "eval" and "eval/policy_version" in r
        ] + [summary["end_eval"]]
    records = RunRecords(
        arm=summary["arm"],
        seed=int(summary["seed"]),
        generations_per_step=int(summary["generations_per_step"]),
    )
    records.trainer_steps = read_jsonl(run_dir / "trainer.jsonl")
    records.env_groups = [r for r in env_records if r.get("kind") == "group"]
    records.evals = [summary["start_eval"], *later_evals]
    records.probe = summary.get("probe") or {}
    return records


def loop_progress(settings: LoopSettings, run_dir: Path, elapsed_s: float) -> str:
    """What a running loop waits for, from the files its processes write (trainer and env metrics)."""
    steps = len(read_jsonl(run_dir / "trainer.jsonl"))
    groups = sum(1 for r in read_jsonl(run_dir / "env.jsonl") if r.get("kind") == "group")
    return (
        f"waiting for the trainer: {steps}/{settings.steps} steps done, {groups} group(s) sampled by the env "
        f"({settings.groups_per_step} per step; {elapsed_s:.0f} s)"
    )


def run_arm(
    settings: LoopSettings,
    arm: str,
    seed: int,
    start_eval: dict[str, Any],
    on_wait: Callable[[str], None] | None = None,
) -> RunRecords:
    """Train one arm for `settings.steps` steps through the real loop; collect its records.
    `on_wait` is told, every few seconds, how far the trainer is and before each evaluation."""
    say = on_wait or logger.info
    run_dir = settings.out_dir / f"{arm}-seed{seed}"
    run_dir.mkdir(parents=True, exist_ok=True)
    prefix = f"{arm}-s{seed}-{uuid.uuid4().hex[:6]}"
    port = free_port()
    api_url = f"http://127.0.0.1:{port}"
    env_metrics = run_dir / "env.jsonl"
    procs: list[subprocess.Popen] = []
    started = time.monotonic()
    try:
        procs.append(start_run_api(run_dir, port).process)
        trainer = start_trainer(
            trainer_document(settings, arm=arm, seed=seed, prefix=prefix, run_dir=run_dir, api_url=api_url),
            run_dir,
        )
        procs.append(trainer)
        for worker in range(settings.workers):
            document = env_document(
                settings, seed=seed * 100 + worker, prefix=prefix, metrics_path=env_metrics
            )
            document["env"]["rollout_server_url"] = api_url
            document["env"]["data_path_to_save_groups"] = str(run_dir / f"groups{worker}.jsonl")
            procs.append(
                start_with_config(
                    ["environments.atropos.agentic_opd_env", "serve"],
                    document,
                    run_dir / f"env{worker}.yaml",
                    run_dir / f"env{worker}.log",
                )
            )
        deadline = started + settings.run_timeout_s
        noticed = time.monotonic()
        while trainer.poll() is None:
            if time.monotonic() - noticed >= WAIT_NOTICE_S:
                noticed = time.monotonic()
                say(loop_progress(settings, run_dir, noticed - started))
            for proc, name in zip(procs[2:], range(settings.workers), strict=True):
                if proc.poll() is not None:
                    raise LearningRunError(
                        f"env worker {name} exited with {proc.returncode}: "
                        f"{(run_dir / f'env{name}.log').read_text()[-2000:]}"
                    )
            if time.monotonic() > deadline:
                raise LearningRunError(f"{arm} seed {seed}: not finished after {settings.run_timeout_s:.0f}s")
            time.sleep(1.0)
        check_trainer_exit(trainer, run_dir)
    finally:
        stop_all(procs)
    from trainer_adapters.checkpointing import checkpoint_dir  # the trainer's layout; imports torch

    evals = []
    for step in evaluation_steps(settings.steps, settings.eval_every):
        say(f"evaluating the weights after step {step} on the held-out tasks")
        evals.append(
            evaluate_checkpoint(
                settings,
                seed=seed,
                prefix=prefix,
                step=step,
                checkpoint=checkpoint_dir(run_dir / "checkpoints", step) / "model",
                metrics_path=run_dir / "evals.jsonl",
            )
        )
    logger.info(
        "%s seed %d: held-out success %s",
        arm,
        seed,
        " ".join(f"{e[POLICY_VERSION_KEY]}:{e['eval/pass@1']:.2f}" for e in evals),
    )
    sent = [g for worker in range(settings.workers) for g in read_jsonl(run_dir / f"groups{worker}.jsonl")]
    final_adapter = adapter_name(prefix, settings.steps)
    try:
        probe = probe_run(settings.vllm_root_url, settings.served_model, final_adapter, sent)
    except Exception as exc:  # noqa: BLE001 - a failed probe is reported, the run's records are kept
        logger.exception("the teacher-gap probe failed")
        probe = {"error": f"{type(exc).__name__}: {exc}"}
    unload_adapters(settings.vllm_root_url, prefix)
    summary = {
        "arm": arm,
        "seed": seed,
        "generations_per_step": settings.generations_per_step,
        "start_eval": start_eval,
        "evals": evals,
        "probe": probe,
    }
    (run_dir / "run.json").write_text(json.dumps(summary, indent=1) + "\n")
    records = load_run(run_dir)
    logger.info(
        "%s seed %d: %d steps in %.0fs", arm, seed, len(records.trainer_steps), time.monotonic() - started
    )
    return records
