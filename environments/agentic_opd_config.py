"""`AgenticOPDConfig`: every knob of the env, flat so that Atropos' `--env.*` flags reach each one."""

from __future__ import annotations

from typing import Literal

from atroposlib.envs.base import BaseEnvConfig
from pydantic import ConfigDict, Field

from hermes_opd.opd_config import OPDConfig, TeacherConfig
from judge.config import JudgeConfig


class AgenticOPDConfig(BaseEnvConfig):
    """Tool-using coding rollouts with hindsight-guided on-policy distillation."""

    model_config = ConfigDict(extra="forbid")

    wandb_name: str | None = Field(
        default="agentic-opd",
        description="Name in wandb and the env's name at the Atropos API (`/register-env` needs one).",
    )
    # -- tasks -----------------------------------------------------------------------------------
    task_source: Literal["builtin", "jsonl", "hf"] = Field(
        default="builtin",
        description="Where tasks come from: the built-in coding tasks, a JSONL file, or a datasets dataset.",
    )
    task_path: str | None = Field(
        default=None, description="JSONL path, or datasets name / local path for `hf`."
    )
    task_split: str = Field(default="train", description="Dataset split for `hf`.")
    task_field_map: dict[str, str] = Field(
        default_factory=dict,
        description="Maps Task fields (task_id, prompt, hidden_tests, ...) to dataset columns.",
    )
    eval_fraction: float = Field(
        default=0.2, ge=0.0, le=1.0, description="Share of tasks held out for `evaluate`."
    )
    seed: int = Field(default=0, description="Seed for task order and sampling.")
    system_prompt: str = Field(
        default="You are a coding agent working in a sandbox. Use the tools to write solution.py, run it, "
        "then answer briefly.",
        description="System message of every rollout.",
    )
    # -- rollouts --------------------------------------------------------------------------------
    max_turns: int = Field(default=6, ge=1, description="Assistant turns per rollout.")
    max_tokens_per_turn: int = Field(default=256, ge=1, description="New tokens per assistant turn.")
    rollout_wall_clock_s: float = Field(default=300.0, gt=0, description="Wall-clock limit of one rollout.")
    temperature: float = Field(default=1.0, ge=0.0, description="Policy sampling temperature.")
    top_p: float = Field(default=1.0, gt=0.0, le=1.0, description="Policy nucleus sampling.")
    eval_temperature: float = Field(default=0.0, ge=0.0, description="Temperature used by `evaluate`.")
    sandbox_root: str | None = Field(
        default=None, description="Parent directory of rollout sandboxes (default: temp)."
    )
    command_timeout_s: float = Field(default=30.0, gt=0, description="Wall-clock limit of one tool command.")
    sandbox_memory_mb: int = Field(
        default=1024, ge=64, description="Address-space limit of tool commands (MiB)."
    )
    sandbox_max_processes: int = Field(default=64, ge=4, description="Process limit of the sandbox user.")
    sandbox_user: Literal["per_sandbox", "nobody"] = Field(
        default="per_sandbox",
        description="`per_sandbox`: each rollout's commands run as their own unprivileged uid, so process limits "
        "and file permissions are per rollout. `nobody`: all share uid 65534.",
    )
    # -- reward ----------------------------------------------------------------------------------
    verifier_feedback: bool = Field(
        default=True,
        description="When hidden tests fail, append their output as a final user message so the last turn has a "
        "next state to learn from.",
    )
    efficiency_shaping: float = Field(
        default=0.0,
        ge=0.0,
        le=1.0,
        description="Score = pass_fraction * (1 - w * turns_used / max_turns); 0 disables shaping.",
    )
    # -- OPD -------------------------------------------------------------------------------------
    opd_enabled: bool = Field(default=True, description="Run hindsight OPD on every rollout.")
    distill_topk: int = Field(default=50, ge=1, description="K of the teacher's top-K prompt logprobs.")
    distill_mode: Literal["topk", "dense_k1"] = Field(
        default="topk",
        description="`topk` rows, or `dense_k1` for stock tinker-atropos (docs/distill-format.md).",
    )
    hint_max_next_state_chars: int = Field(
        default=4000, ge=100, description="Next-state text shown to the judge, per message."
    )
    send_equal_score_groups_with_distill: bool = Field(
        default=True, description="Send groups with equal scores when they carry teacher rows."
    )
    judge_backend: Literal["llm", "rules"] = Field(
        default="llm", description="`llm` (OpenAI-compatible) or `rules` (offline)."
    )
    judge_base_url: str | None = Field(default=None, description="Judge endpoint; None: the policy server.")
    judge_model: str | None = Field(default=None, description="Judge model; None: the policy model.")
    judge_api_key_env: str | None = Field(default=None, description="Env var holding the judge API key.")
    judge_votes: int = Field(default=3, ge=1, description="Judge votes per turn (m).")
    judge_temperature: float = Field(default=0.7, ge=0.0, description="Judge sampling temperature.")
    judge_max_tokens: int = Field(
        default=2048, ge=1, description="Judge completion budget (thinking models need room)."
    )
    judge_timeout_s: float = Field(default=60.0, gt=0, description="Timeout of one judge request.")
    judge_concurrency: int = Field(default=16, ge=1, description="Turns judged at once.")
    vote_policy: Literal["majority", "any"] = Field(
        default="majority", description="How votes become a decision."
    )
    hint_choice: Literal["representative", "longest"] = Field(
        default="representative", description="Which hint wins."
    )
    teacher_base_url: str | None = Field(
        default=None, description="Teacher vLLM endpoint; None: the policy server."
    )
    teacher_model: str | None = Field(default=None, description="Teacher model; None: the policy model.")
    teacher_concurrency: int = Field(default=8, ge=1, description="Teacher requests in flight.")
    teacher_timeout_s: float = Field(default=120.0, gt=0, description="Timeout of one teacher request.")
    check_teacher_tokenizer: bool = Field(
        default=True, description="Refuse a teacher with another tokenizer."
    )
    teacher_path: Literal["auto", "transformers", "generate", "completions"] = Field(
        default="auto",
        description="Teacher scoring path (docs/scaling.md); auto picks the cheapest available.",
    )
    teacher_local_model_dir: str | None = Field(
        default=None, description="Teacher weights on this machine, for the in-process `transformers` path."
    )
    spool_dir: str | None = Field(
        default=None,
        description="Directory where groups the Atropos API could not take are kept and resent, oldest "
        "first (default ./spool/<env name>); see docs/reliability.md.",
    )
    metrics_path: str | None = Field(
        default=None,
        description="Local metrics JSONL (always written). Default: next to `data_path_to_save_groups`, else ./opd_metrics.jsonl.",
    )

    def opd_config(self) -> OPDConfig:
        return OPDConfig(
            enabled=self.opd_enabled,
            distill_topk=self.distill_topk,
            distill_mode=self.distill_mode,
            hint_max_next_state_chars=self.hint_max_next_state_chars,
            judge_concurrency=self.judge_concurrency,
            judge_timeout_s=self.judge_timeout_s * 3,
            send_equal_score_groups_with_distill=self.send_equal_score_groups_with_distill,
            judge=JudgeConfig(
                backend=self.judge_backend,
                base_url=self.judge_base_url,
                model=self.judge_model,
                api_key_env=self.judge_api_key_env,
                m=self.judge_votes,
                temperature=self.judge_temperature,
                max_tokens=self.judge_max_tokens,
                timeout_s=self.judge_timeout_s,
                vote_policy=self.vote_policy,
                hint_choice=self.hint_choice,
            ),
            teacher=TeacherConfig(
                base_url=self.teacher_base_url,
                model=self.teacher_model,
                concurrency=self.teacher_concurrency,
                timeout_s=self.teacher_timeout_s,
                check_tokenizer=self.check_teacher_tokenizer,
                path=self.teacher_path,
                local_model_dir=self.teacher_local_model_dir,
            ),
        )
