"""One run of `hermes-opd bench live`: a simulated user talks to the copying student through
`hermes-opd proxy`; the proxy turns each finished turn into a sample (hint judge + teacher for OPD,
process judge for PRM) and sends its groups to atroposlib's `run-api`; `hermes-opd train` (the
torch trainer, LoRA) trains on them and loads each step's adapter into the vLLM; the proxy serves
the newest adapter. Real processes only; each is stopped by its PID.

The user works in rounds, one per optimizer step: `samples_per_step` sessions (each one user turn,
one trained sample), then it waits until the proxy serves the adapter of that step. So the weights
after step N have learned from exactly the user turns of rounds 1..N, every sample is sampled by the
policy of the step before (lag 0), and every arm and seed is evaluated at the same numbers of user
turns. Held-out success is the env's own `evaluate` on the held-out convention tasks, without a hint,
on the trainer's saved weights (hermes_opd/learning_study/loop.py, `evaluate_checkpoint`)."""

from __future__ import annotations

import asyncio
import json
import logging
import random
import subprocess
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from openai import AsyncOpenAI

from environments.tasks.conventions import ConventionTask, convention_splits, generate, team_convention
from hermes_opd.contract.policy_version import POLICY_VERSION_KEY, adapter_name
from hermes_opd.learning_study.live_session import SessionResult, converse
from hermes_opd.learning_study.live_user import OUTCOMES, Phrasings
from hermes_opd.learning_study.loop import (
    LearningRunError,
    LoopSettings,
    check_trainer_exit,
    evaluate_checkpoint,
    evaluation_steps,
    read_jsonl,
    start_run_api,
    start_trainer,
    start_with_config,
    stop_all,
    trainer_document,
    unload_adapters,
)
from hermes_opd.runtime.server_process import free_port, wait_healthy

LIVE_ARMS: dict[str, tuple[float, float]] = {"opd": (1.0, 0.0), "prm": (0.0, 1.0), "combined": (1.0, 1.0)}
"""Arm -> (w_opd, w_prm), w_grpo 0 in every arm (a live session has no outcome score): OPD only,
PRM only (OpenClaw-RL's Binary RL), and both in one update (its `combine`)."""
TOP_UP_AFTER_S = 30.0
"""A round whose samples did not all reach the trainer (a turn lost in the pipeline) gets one more
session per missing sample after this long with nothing pending."""


@dataclass
class LiveSettings:
    loop: LoopSettings
    """Model, vLLM, steps, samples per step (groups_per_step x group_size), lr, env (evaluation)."""
    phrasings: Phrasings = field(default_factory=Phrasings)
    max_tokens: int = 96
    concurrency: int = 8
    """Sessions in flight at once within a round."""
    judge: dict[str, Any] = field(default_factory=dict)
    """Hint-judge keys over the bench's (rules, quoting the user): `backend: constant` is the control."""

    @property
    def samples_per_step(self) -> int:
        return self.loop.generations_per_step


def proxy_document(
    settings: LiveSettings, arm: str, *, port: int, api_url: str, prefix: str, run_dir: Path
) -> dict:
    w_opd, w_prm = LIVE_ARMS[arm]
    loop = settings.loop
    return {
        "policy_base_url": f"{loop.vllm_root_url}/v1",
        "policy_model": loop.served_model,
        "tokenizer": loop.model_dir,
        "port": port,
        "atropos_url": api_url,
        "spool_dir": str(run_dir / "spool"),
        "groups_path": str(run_dir / "groups.jsonl"),
        "policy_lora_prefix": prefix,
        "adapter_poll_s": 0.5,
        "samples_per_group": loop.group_size,
        "group_wait_s": 5.0,
        "opd": {
            "enabled": w_opd > 0,
            # the live user's words are the hint (judge/rules_backend.py, finding 8)
            "judge": {"backend": "rules", "rules_quote_user_feedback": True, **settings.judge},
            "prm": {"enabled": w_prm > 0, "judge": {"backend": "rules"}},
        },
    }


def live_trainer_document(
    settings: LiveSettings, arm: str, *, seed: int, prefix: str, run_dir: Path, api_url: str
) -> dict:
    document = trainer_document(
        settings.loop, arm="opd", seed=seed, prefix=prefix, run_dir=run_dir, api_url=api_url
    )
    w_opd, w_prm = LIVE_ARMS[arm]
    document["loss"] = {**document.get("loss", {}), "w_grpo": 0.0, "w_opd": w_opd, "w_prm": w_prm}
    return document


@dataclass
class Round:
    step: int
    sessions: list[SessionResult]
    user_turns_total: int
    wait_s: float

    def record(self) -> dict[str, Any]:
        counts = Counter(s.outcome for s in self.sessions)
        return {
            "step": self.step,
            "user_turns": len(self.sessions),
            "user_turns_total": self.user_turns_total,
            "accepted": counts["accept"],
            "outcomes": {o: counts[o] for o in OUTCOMES},
            "wait_s": round(self.wait_s, 2),
            "sessions": [s.record() for s in self.sessions],
        }


class SimulatedUser:
    """Runs the rounds against one proxy."""

    def __init__(self, settings: LiveSettings, seed: int) -> None:
        self.settings = settings
        self.seed = seed
        train, _ = convention_splits()  # under the run's convention (HERMES_OPD_CONVENTION), as the env's
        specs = {t.task_id: t for t in generate(convention=team_convention())["train"]}
        self.tasks: list[tuple[ConventionTask, Any]] = [(specs[t.task_id], t) for t in train]
        self.user_turns = 0

    async def round(self, client: AsyncOpenAI, step: int, count: int, tag: str = "") -> list[SessionResult]:
        rng = random.Random(f"live-tasks-{self.seed}-{step}{tag}")
        picked = rng.sample(self.tasks, k=min(count, len(self.tasks)))
        while len(picked) < count:
            picked.append(rng.choice(self.tasks))
        gate = asyncio.Semaphore(self.settings.concurrency)

        async def one(i: int, spec: ConventionTask, task: Any) -> SessionResult:
            async with gate:
                return await converse(
                    client,
                    self.settings.loop.served_model,
                    spec,
                    task,
                    phrasings=self.settings.phrasings,
                    rng=random.Random(f"live-reply-{self.seed}-{step}{tag}-{i}"),
                    max_tokens=self.settings.max_tokens,
                )

        results = await asyncio.gather(*(one(i, s, t) for i, (s, t) in enumerate(picked)))
        self.user_turns += len(results)
        return list(results)


async def _metrics(http: httpx.AsyncClient, proxy_root: str) -> dict[str, Any]:
    return (await http.get(f"{proxy_root}/metrics.json")).json()


async def run_rounds(
    settings: LiveSettings, proxy_root: str, seed: int, trainer: subprocess.Popen, deadline: float, say
) -> list[Round]:
    """Every round: its sessions, then wait for the step's adapter to be live in the proxy."""
    for name in ("httpx", "httpx2"):  # one line per request and per metrics poll otherwise
        logging.getLogger(name).setLevel(logging.WARNING)
    user = SimulatedUser(settings, seed)
    client = AsyncOpenAI(base_url=f"{proxy_root}/v1", api_key="EMPTY", max_retries=0, timeout=300)
    rounds: list[Round] = []
    async with httpx.AsyncClient(timeout=30) as http:
        try:
            for step in range(1, settings.loop.steps + 1):
                sessions = await user.round(client, step, settings.samples_per_step)
                waited = time.monotonic()
                topped_up = 0
                idle_since: float | None = None
                while True:
                    metrics = await _metrics(http, proxy_root)
                    if metrics.get("policy_version", 0) >= step:
                        break
                    if trainer.poll() is not None:
                        raise LearningRunError(
                            f"the trainer exited with {trainer.returncode} before step {step}"
                        )
                    if time.monotonic() > deadline:
                        raise LearningRunError(f"step {step}: no adapter before the run's deadline")
                    feed = metrics.get("feed", {})
                    missing = step * settings.samples_per_step + topped_up - feed.get("samples_grouped", 0)
                    if feed.get("pending", 0) == 0 and missing > 0:
                        idle_since = idle_since or time.monotonic()
                        if time.monotonic() - idle_since > TOP_UP_AFTER_S:
                            if topped_up >= settings.samples_per_step:
                                raise LearningRunError(
                                    f"step {step}: {topped_up + missing} samples lost in the proxy's pipeline "
                                    f"(see {settings.loop.out_dir}/*/proxy.log)"
                                )
                            say(
                                f"step {step}: {missing} sample(s) lost in the pipeline; {missing} more session(s)"
                            )
                            sessions += await user.round(client, step, missing, tag=f"-topup{topped_up}")
                            topped_up += missing
                            idle_since = None
                    else:
                        idle_since = None
                    await asyncio.sleep(0.25)
                rounds.append(Round(step, sessions, user.user_turns, time.monotonic() - waited))
                accepted = sum(s.outcome == "accept" for s in sessions)
                say(f"step {step}: {len(sessions)} user turns, {accepted} accepted; adapter live")
        finally:
            await client.close()
    return rounds


def run_live_arm(
    settings: LiveSettings, arm: str, seed: int, start_eval: dict[str, Any], say
) -> dict[str, Any]:
    """One arm and seed: the rounds, then the held-out evaluations; returns the run's record (also
    written to `<out>/<arm>-seed<seed>/run.json`)."""
    loop = settings.loop
    run_dir = loop.out_dir / f"{arm}-seed{seed}"
    run_dir.mkdir(parents=True, exist_ok=True)
    prefix = f"live-{arm}-s{seed}-{uuid.uuid4().hex[:6]}"
    api_port, proxy_port = free_port(), free_port()
    api_url, proxy_root = f"http://127.0.0.1:{api_port}", f"http://127.0.0.1:{proxy_port}"
    procs: list[subprocess.Popen] = []
    started = time.monotonic()
    try:
        procs.append(start_run_api(run_dir, api_port).process)
        proxy = start_with_config(
            ["hermes_opd.commands.proxy"],
            proxy_document(settings, arm, port=proxy_port, api_url=api_url, prefix=prefix, run_dir=run_dir),
            run_dir / "proxy.yaml",
            run_dir / "proxy.log",
        )
        procs.append(proxy)
        wait_healthy(
            proxy,
            f"{proxy_root}/health",
            what="the proxy",
            timeout_s=120,
            log_path=run_dir / "proxy.log",
            poll_s=0.25,
            error=LearningRunError,
        )
        trainer = start_trainer(
            live_trainer_document(settings, arm, seed=seed, prefix=prefix, run_dir=run_dir, api_url=api_url),
            run_dir,
        )
        procs.append(trainer)
        rounds = asyncio.run(
            run_rounds(settings, proxy_root, seed, trainer, started + loop.run_timeout_s, say)
        )
        proxy_metrics = httpx.get(f"{proxy_root}/metrics.json", timeout=10).json()
        try:
            trainer.wait(timeout=max(1.0, started + loop.run_timeout_s - time.monotonic()))
        except subprocess.TimeoutExpired as exc:
            raise LearningRunError(f"{arm} seed {seed}: the trainer did not finish") from exc
        check_trainer_exit(trainer, run_dir)
    finally:
        stop_all(procs)
    from trainer_adapters.checkpointing import checkpoint_dir  # the trainer's layout; imports torch

    turns_after = {r.step: r.user_turns_total for r in rounds}
    evals = [{**start_eval, "user_turns": 0}]
    for step in evaluation_steps(loop.steps, loop.eval_every):
        say(f"evaluating the weights after step {step} on the held-out tasks")
        result = evaluate_checkpoint(
            loop,
            seed=seed,
            prefix=prefix,
            step=step,
            checkpoint=checkpoint_dir(run_dir / "checkpoints", step) / "model",
            metrics_path=run_dir / "evals.jsonl",
        )
        evals.append({**result, "user_turns": turns_after[step]})
    unload_adapters(loop.vllm_root_url, prefix)
    record = {
        "arm": arm,
        "seed": seed,
        "prefix": prefix,
        "final_adapter": adapter_name(prefix, loop.steps),
        "curve": [(e["user_turns"], e["eval/pass@1"]) for e in evals],
        "gain": evals[-1]["eval/pass@1"] - evals[0]["eval/pass@1"],
        "evals": [
            {
                k: v
                for k, v in e.items()
                if k in ("user_turns", "eval/pass@1", POLICY_VERSION_KEY, "conventions")
            }
            for e in evals
        ],
        "rounds": [r.record() for r in rounds],
        "trainer_steps": read_jsonl(run_dir / "trainer.jsonl"),
        "proxy_metrics": proxy_metrics,
        "wall_s": round(time.monotonic() - started, 1),
    }
    (run_dir / "run.json").write_text(json.dumps(record, indent=1, default=float) + "\n")
    return record
