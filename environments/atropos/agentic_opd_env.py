"""`AgenticOPDEnv`: an Atropos environment of tool-using coding rollouts with hindsight OPD.

Per group: `group_size` rollouts run concurrently, each in its own sandbox. As soon as one rollout
ends it is verified (hidden tests in a fresh sandbox) and handed to the OPD pipeline, overlapping
the other rollouts' generation. The group is a `ScoredDataGroup` with exact tokens, masks,
`inference_logprobs`, scores, distill rows and per-sequence provenance.

Run it with Atropos' CLI: `python -m environments.atropos.agentic_opd_env serve|process|evaluate ...`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import statistics
import time
from collections import Counter, deque
from pathlib import Path
from typing import Any

from atroposlib.envs.base import BaseEnv
from atroposlib.envs.server_handling.server_baseline import APIServerConfig

from environments.atropos.agentic_opd_config import AgenticOPDConfig
from environments.atropos.cli_lifecycle import CliLifecycleMixin
from environments.atropos.embedded_paths import default_dev_model_dir
from environments.atropos.eval_choices import eval_convention_choices
from environments.atropos.server import CurrentVLLMServer
from environments.delivery.group_builder import (
    FinishedRollout,
    build_group,
    has_distill_signal,
    trim_after_last_turn,
)
from environments.delivery.policy_adapter import PolicyAdapterTracker, PolicyWeights
from environments.delivery.send_spool import SendSpool, register_again_until_back
from environments.delivery.student_topk_check import check_policy_top_logprobs
from environments.delivery.tinker_drops import DenseK1Notice
from environments.pipeline.build import build_opd_pipeline
from environments.pipeline.opd_config import OPDConfig
from environments.pipeline.opd_metrics import group_metrics
from environments.pipeline.opd_pipeline import OPDPipeline
from environments.pipeline.role_servers import (
    RoleServers,
    check_role_servers,
    describe_role_servers,
    follow_live_adapter,
    resolve_role_servers,
)
from environments.rollout.agent_loop import RolloutLimits, run_rollout
from environments.rollout.failed_rollouts import kept_rollouts
from environments.rollout.sandbox.limits import SandboxLimits
from environments.rollout.sandbox.sandbox import Sandbox
from environments.rollout.tools import TOOL_SCHEMAS
from environments.rollout.verifier import VerifierConfig, verify
from environments.tasks.builtin import builtin_tasks
from environments.tasks.convention_choice import choice_metrics
from environments.tasks.conventions import convention_splits
from environments.tasks.loaders import load_tasks
from environments.tasks.split import split_tasks
from environments.tasks.task import Task
from hermes_opd.contract.errors import ConfigError
from hermes_opd.contract.policy_version import POLICY_VERSION_KEY, stamp_policy_version
from hermes_opd.runtime.process_tuning import freeze_startup_heap
from hermes_opd.vllm_api.wire_format import GeneratedSequence

logger = logging.getLogger(__name__)


class AgenticOPDEnv(CliLifecycleMixin, BaseEnv):
    name = "agentic-opd"
    env_config_cls = AgenticOPDConfig
    server_cls = CurrentVLLMServer
    check_servers_at_setup = True
    """`setup()` checks the policy, judge and teacher servers (environments/pipeline/role_servers.py)."""

    def __init__(self, config: AgenticOPDConfig, server_configs, slurm: bool = False, testing: bool = False):
        super().__init__(config, server_configs, slurm, testing)
        self.config: AgenticOPDConfig = config
        self.train_tasks: list[Task] = []
        self.eval_tasks: list[Task] = []
        self._task_order: list[int] = []
        self._task_cursor = 0
        self.pipeline: OPDPipeline | None = None
        self._pending_metrics: deque[dict[str, Any]] = deque(maxlen=1000)
        self.groups_built = 0
        self.send_spool = SendSpool(
            Path(config.spool_dir) if config.spool_dir else Path("spool") / self.name,
            base_url=lambda: self.config.rollout_server_url,
            env_id=lambda: getattr(self, "env_id", None),
            post_json=self._post_json_with_compression,
        )
        """Where groups go on their way to the Atropos API (environments/delivery/send_spool.py)."""
        self.dense_k1_notice = DenseK1Notice(logger.warning)
        self.drop_equal_scores_without_distill = False
        self.opd_config: OPDConfig = config.opd_config()
        """The nested pipeline config, nested once from the flat knobs (the config is read at __init__)."""
        policy_configs = [s.config for s in self.server.servers if hasattr(s, "config")]
        self.role_servers: RoleServers = resolve_role_servers(config, policy_configs, self.opd_config)
        """Which endpoint serves policy, judge and teacher: resolved once, read by setup's check, the
        pipeline and `hermes-opd process`'s preflight."""
        self.policy_tracker: PolicyAdapterTracker | None = None

    # -- Atropos hooks ---------------------------------------------------------------------------
    @classmethod
    def config_init(cls) -> tuple[AgenticOPDConfig, list[APIServerConfig]]:
        """Defaults for the embedded local setup: the dev model on a local vLLM at :9001 (the Atropos API
        keeps its default :8000)."""
        model_dir = str(default_dev_model_dir())
        env_config = AgenticOPDConfig(
            tokenizer_name=model_dir,
            group_size=4,
            max_token_length=2048,
            use_wandb=False,
            total_steps=10,
            batch_size=16,
            steps_per_eval=100,
            judge_backend="rules",
            prm_judge_backend="rules",
        )
        servers = [
            APIServerConfig(
                model_name="dev-model",
                base_url="http://127.0.0.1:9001/v1",
                api_key="EMPTY",
                tokenizer_name=model_dir,
                server_type="vllm",
                timeout=300,
            )
        ]
        return env_config, servers

    async def setup(self) -> None:
        if self.config.task_source == "conventions":  # ships its own train / held-out split
            self.train_tasks, self.eval_tasks = convention_splits()
        else:
            self.train_tasks, self.eval_tasks = split_tasks(self._load_tasks(), self.config.eval_fraction)
        if not self.train_tasks:
            raise ConfigError(
                f"no training tasks left after holding out eval_fraction={self.config.eval_fraction}"
            )
        self._task_order = list(range(len(self.train_tasks)))
        random.Random(self.config.seed).shuffle(self._task_order)
        if self.config.send_equal_score_groups_with_distill and self.config.ensure_scores_are_not_same:
            # We apply that filter ourselves (handle_send_to_api), keeping equal-score groups with OPD rows.
            self.drop_equal_scores_without_distill = True
            self.config.ensure_scores_are_not_same = False
        logger.info("%s", describe_role_servers(self.role_servers))
        if self.check_servers_at_setup and self.role_servers.policy:
            await check_role_servers(
                self.role_servers
            )  # before the teacher's tokenizer check: errors name the role
        if self.config.opd_enabled or self.opd_config.prm.enabled:
            self.pipeline = await self._build_pipeline()
        policy_client = getattr(self.server.servers[0], "client", None) if self.server.servers else None
        if policy_client is not None:
            self.policy_tracker = PolicyAdapterTracker(policy_client, self.config.policy_lora_prefix)
            if self.config.student_topk_k and self.check_servers_at_setup:
                await check_policy_top_logprobs(policy_client, self.config.student_topk_k, self.tokenizer)
        logger.info(
            "agentic-opd: %d train / %d eval tasks; OPD %s",
            len(self.train_tasks),
            len(self.eval_tasks),
            "on" if self.pipeline else "off",
        )
        frozen = freeze_startup_heap()  # left out of every later full collection
        logger.debug("start-up heap frozen: %d objects", frozen)

    async def get_next_item(self) -> Task:
        task = self.task_at(self._task_cursor)
        self._task_cursor += 1
        return task

    def task_at(self, index: int) -> Task:
        """The training task at position `index` of the env's deterministic order (cycling)."""
        return self.train_tasks[self._task_order[index % len(self._task_order)]]

    def seek(self, index: int) -> None:
        """Make `get_next_item` continue from position `index` (used to resume batch jobs)."""
        self._task_cursor = index

    async def close(self) -> None:
        """Flush the send spool; release HTTP sessions and health-check tasks (judge, teacher, policy)."""
        if self.send_spool.opened:
            with contextlib.suppress(Exception):
                await self.send_spool.flush()
        if self.pipeline is not None:
            await self.pipeline.aclose()
        for server in getattr(self.server, "servers", []) or []:
            task = getattr(server, "check_task", None)
            if task is not None:
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
            for name in ("client", "openai"):
                closer = getattr(getattr(server, name, None), "close", None)
                if closer is not None:
                    with contextlib.suppress(Exception):
                        await closer()

    async def _send_scored_data_to_api(self, scored_data) -> None:
        """BaseEnv's one POST, replaced: send, or keep the groups in the spool (never lost)."""
        await self.send_spool.send(scored_data)

    async def get_status(self):
        """BaseEnv.get_status, surviving an API restart: re-register (waiting, with backoff, until
        the API is back and a trainer has started), then ask again. Spooled groups go out with the
        next send, under the new env id."""
        try:
            return await super().get_status()
        except Exception as exc:  # noqa: BLE001 - tenacity already retried it three times
            if not self.send_spool.settings.reregister_on_api_restart:
                raise
            logger.warning(
                "Atropos API status failed (%s: %s); registering this env again", type(exc).__name__, exc
            )
        await register_again_until_back(self.register_env, self.send_spool.settings.reregister_max_wait_s)
        logger.info("registered again with the Atropos API as env %s", getattr(self, "env_id", None))
        return await super().get_status()

    async def collect_trajectories(self, item: Task) -> tuple[dict[str, Any] | None, list]:
        started = time.monotonic()
        weights = await self._policy_weights()
        outcomes = await asyncio.gather(
            *(self._rollout_and_distill(item, i, weights) for i in range(self.config.group_size)),
            return_exceptions=True,
        )
        rollouts = kept_rollouts(outcomes, f"a rollout of {item.task_id}")
        if not rollouts:
            logger.error("every rollout of %s failed; no group", item.task_id)
            return None, []
        group = build_group(
            list(rollouts),
            include_messages=bool(self.config.include_messages),
            opd=self.opd_config,
            generation_params={"temperature": self.config.temperature, "top_p": self.config.top_p},
            student_topk_k=self.config.student_topk_k,
        )
        stamp_policy_version(group, weights.version if weights is not None else None)
        if len(rollouts) < self.config.group_size:
            # atroposlib drops a group whose size differs from group_size unless the group says so
            group["group_overrides"]["group_size"] = len(rollouts)
        self._record_metrics(
            item,
            list(rollouts),
            time.monotonic() - started,
            failed=len(outcomes) - len(rollouts),
            policy_version=weights.version if weights is not None else None,
        )
        self.groups_built += 1
        return group, []

    async def handle_send_to_api(
        self,
        scored_data,
        item=None,
        do_send_to_api: bool = True,
        abort_on_any_max_length_exceeded: bool = True,
    ):
        for group in scored_data if isinstance(scored_data, list) else [scored_data]:
            self.dense_k1_notice.check(
                group
            )  # once per run: tinker-atropos drops equal-score dense_k1 groups
        if self.drop_equal_scores_without_distill:
            groups = scored_data if isinstance(scored_data, list) else [scored_data]
            kept = [
                g for g in groups if g is not None and (len(set(g["scores"])) > 1 or has_distill_signal(g))
            ]
            if len(kept) < len([g for g in groups if g is not None]):
                logger.warning("dropping a group whose scores are all equal and which has no teacher rows")
            if not kept:
                return None
            scored_data = kept if isinstance(scored_data, list) else kept[0]
        return await super().handle_send_to_api(
            scored_data, item, do_send_to_api, abort_on_any_max_length_exceeded
        )

    async def evaluate(self, *args, **kwargs) -> dict[str, float]:
        """pass@1 (every hidden test passes) and mean score over the eval split, one rollout each."""
        started = time.time()
        weights = await self._policy_weights(teacher=False)
        outcomes = await asyncio.gather(
            *(
                self._rollout(task, seed=i, eval_mode=True, weights=weights)
                for i, task in enumerate(self.eval_tasks)
            ),
            return_exceptions=True,
        )
        results = kept_rollouts(outcomes, "an eval rollout")
        failed = len(outcomes) - len(results)
        choices = eval_convention_choices(self.eval_tasks, outcomes)
        scores = [r.score for r in results] + [0.0] * failed  # a failed rollout counts, as 0
        metrics = {
            "eval/pass@1": sum(
                1 for r in results if r.info["verifier"]["passed"] == r.info["verifier"]["total"] > 0
            )
            / max(1, len(outcomes)),
            "eval/mean_score": statistics.fmean(scores) if scores else 0.0,
            "eval/tasks": float(len(outcomes)),
            "eval/rollouts_failed": float(failed),
            "eval/policy_version": float(weights.version if weights is not None else 0),
            **choice_metrics(choices),
        }
        logger.info("evaluate: %s", metrics)
        self._append_metrics({"kind": "eval", "time": time.time(), **metrics})
        if choices:  # which convention each attempt followed (environments/tasks/convention_choice.py)
            self._append_metrics(
                {
                    "kind": "eval_choices",
                    "time": time.time(),
                    "eval/policy_version": metrics["eval/policy_version"],
                    "choices": [c.record() for c in choices],
                }
            )
        if self.config.data_dir_to_save_evals:
            await self.evaluate_log(metrics=metrics, start_time=started, end_time=time.time())
        return metrics

    async def wandb_log(self, wandb_metrics: dict | None = None):
        wandb_metrics = dict(wandb_metrics or {})
        if self._pending_metrics:
            for key in self._pending_metrics[-1]:
                values = [m[key] for m in self._pending_metrics if isinstance(m.get(key), int | float)]
                if values:
                    wandb_metrics[key] = statistics.fmean(values)
            self._pending_metrics.clear()
        if self.send_spool.opened:
            wandb_metrics.update(self.send_spool.stats.as_metrics(self.send_spool.spool.pending_groups()))
        await super().wandb_log(wandb_metrics)

    # -- rollouts --------------------------------------------------------------------------------
    async def _policy_weights(self, teacher: bool = True) -> PolicyWeights | None:
        """The newest weights on the policy server; the teacher scores with them too when it shares
        the policy's server and model (the teacher is the policy plus the hint)."""
        if self.policy_tracker is None or not self.config.policy_lora_prefix:
            return None
        weights = await self.policy_tracker.current()
        if teacher:
            follow_live_adapter(self.pipeline, self.role_servers, weights.model)
        return weights

    async def _rollout_and_distill(
        self, task: Task, index: int, weights: PolicyWeights | None = None
    ) -> FinishedRollout:
        rollout = await self._rollout(task, seed=index, weights=weights)
        if self.pipeline is not None and rollout.trajectory.turns:
            try:
                rollout.distill = await self.pipeline.process(rollout.trajectory)
            except Exception as exc:  # noqa: BLE001 - OPD never costs the GRPO data
                logger.exception(
                    "OPD failed for a rollout of %s; sequence sent without teacher rows", task.task_id
                )
                rollout.info["opd_error"] = f"{type(exc).__name__}: {exc}"
        return rollout

    async def _rollout(
        self, task: Task, seed: int, eval_mode: bool = False, weights: PolicyWeights | None = None
    ) -> FinishedRollout:
        limits = SandboxLimits(
            command_timeout_s=self.config.command_timeout_s,
            memory_mb=self.config.sandbox_memory_mb,
            max_processes=self.config.sandbox_max_processes,
            user=self.config.sandbox_user,
        )
        rollout_limits = RolloutLimits(
            max_turns=self.config.max_turns,
            max_tokens_per_turn=self.config.max_tokens_per_turn,
            max_token_length=self.config.max_token_length,
            wall_clock_s=self.config.rollout_wall_clock_s,
        )
        messages = [
            {"role": "system", "content": self.config.system_prompt},
            {"role": "user", "content": task.prompt},
        ]
        temperature = self.config.eval_temperature if eval_mode else self.config.temperature
        async with Sandbox.create(limits, root_dir=self.config.sandbox_root) as sandbox:
            outcome = await run_rollout(
                tokenizer=self.tokenizer,
                sampler=self._sampler(temperature, eval_mode, weights.model if weights else None),
                sandbox=sandbox,
                messages=messages,
                tools=TOOL_SCHEMAS,
                limits=rollout_limits,
            )
            verdict = await verify(
                task,
                sandbox,
                limits=limits,
                config=VerifierConfig(
                    efficiency_weight=self.config.efficiency_shaping,
                    public_fraction=self.config.public_test_fraction,
                ),
                turns_used=len(outcome.recorder.turns),
                max_turns=self.config.max_turns,
                root_dir=self.config.sandbox_root,
            )
        trajectory = outcome.recorder.trajectory(score=verdict.score, finish_reason=outcome.stop_reason)
        if self.config.verifier_feedback and verdict.feedback and trajectory.turns:
            # The verifier's word is the last turn's next state (messages only; no tokens are added).
            trajectory.messages.append({"role": "user", "content": verdict.feedback, "name": "verifier"})
        trajectory = trim_after_last_turn(trajectory, self.config.max_token_length - 1)
        info = {
            "task_id": task.task_id,
            "stop_reason": outcome.stop_reason,
            "turns": len(trajectory.turns),
            "tool_calls": outcome.tool_calls,
            "tool_errors": outcome.tool_errors,
            "malformed_calls": outcome.malformed_calls,
            "rollout_s": round(outcome.duration_s, 3),
            "verifier": {"passed": verdict.passed, "total": verdict.total, "timed_out": verdict.timed_out},
        }
        if outcome.error:
            info["error"] = outcome.error
        return FinishedRollout(trajectory=trajectory, score=verdict.score, distill=None, info=info)

    def _sampler(self, temperature: float, eval_mode: bool, policy_model: str | None = None):
        split = "eval" if eval_mode else "train"
        adapter = {"policy_model": policy_model} if policy_model else {}
        k = 0 if eval_mode else self.config.student_topk_k  # the rows go into groups; evaluation has none
        if k:
            adapter["top_logprobs"] = k

        async def sample(context: list[int], max_tokens: int) -> GeneratedSequence:
            result = await self.server.tokens_and_logprobs_completion(
                input_ids=list(context),
                n=1,
                max_tokens=max_tokens,
                temperature=temperature,
                top_p=self.config.top_p,
                split=split,
                **adapter,
            )
            _, outputs, logprobs, finish = result[:4]
            top_ids, top_logprobs = result[4][0] if k else (None, None)
            return GeneratedSequence(outputs[0], logprobs[0], str(finish[0]), "", top_ids, top_logprobs)

        return sample

    # -- setup helpers ---------------------------------------------------------------------------
    def _load_tasks(self) -> list[Task]:
        source = self.config.task_source
        if source == "builtin":
            return builtin_tasks()
        if not self.config.task_path:
            raise ConfigError(f"task_source={source!r} needs task_path")
        return load_tasks(
            source,
            self.config.task_path,
            split=self.config.task_split,
            field_map=self.config.task_field_map or None,
            test_format=self.config.task_test_format,
        )

    async def _build_pipeline(self) -> OPDPipeline:
        return await build_opd_pipeline(
            self.tokenizer,
            self.opd_config,
            self.role_servers.teacher.endpoint,
            self.role_servers.judge.endpoint,
            prm_judge_server=self.role_servers.prm_judge_endpoint,
        )

    # -- metrics ---------------------------------------------------------------------------------
    def _metrics_path(self) -> Path:
        return self.metrics_path_for(self.config)

    @staticmethod
    def metrics_path_for(config: AgenticOPDConfig) -> Path:
        if config.metrics_path:
            return Path(config.metrics_path)
        if config.data_path_to_save_groups:
            return Path(config.data_path_to_save_groups).with_name("metrics.jsonl")
        return Path("opd_metrics.jsonl")

    def _append_metrics(self, record: dict[str, Any]) -> None:
        path = self._metrics_path()
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8") as handle:
            handle.write(json.dumps(record, sort_keys=True) + "\n")
            handle.flush()

    def _record_metrics(
        self,
        task: Task,
        rollouts: list[FinishedRollout],
        duration_s: float,
        failed: int = 0,
        policy_version: int | None = None,
    ) -> None:
        stops = Counter(r.info["stop_reason"] for r in rollouts)
        metrics: dict[str, Any] = {
            "group/score_mean": statistics.fmean(r.score for r in rollouts),
            "group/scores_equal": float(len({r.score for r in rollouts}) == 1),
            "group/turns_mean": statistics.fmean(len(r.trajectory.turns) for r in rollouts),
            "group/tool_calls": sum(r.info["tool_calls"] for r in rollouts),
            "group/malformed_calls": sum(r.info["malformed_calls"] for r in rollouts),
            "group/duration_s": duration_s,
            "group/rollout_mean_s": statistics.fmean(r.info["rollout_s"] for r in rollouts),
            "group/tail_after_rollouts_s": max(0.0, duration_s - max(r.info["rollout_s"] for r in rollouts)),
            "group/opd_duration_mean_s": statistics.fmean(r.distill.duration_s for r in rollouts if r.distill)
            if any(r.distill for r in rollouts)
            else 0.0,
            **{f"group/stop_{reason}": count for reason, count in stops.items()},
            "group/rollouts_failed": failed,
        }
        distills = [r.distill for r in rollouts if r.distill is not None]
        if distills:
            metrics.update(group_metrics(distills))
        self._pending_metrics.append(metrics)
        record = {"kind": "group", "task_id": task.task_id, "time": time.time(), **metrics}
        if policy_version is not None:
            record[POLICY_VERSION_KEY] = policy_version
        self._append_metrics(record)


if __name__ == "__main__":
    AgenticOPDEnv.cli()
