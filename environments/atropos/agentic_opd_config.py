"""`AgenticOPDConfig`: every knob of the env, flat so that Atropos' `--env.*` flags reach each one."""

from __future__ import annotations

from typing import Any, Literal

from atroposlib.envs.base import BaseEnvConfig
from pydantic import ConfigDict, Field, create_model, model_validator

from environments.pipeline.flat_fields import FlatGroup, flat_fields, flatten_values, nest_values
from environments.pipeline.opd_config import OPDConfig, PRMConfig, TeacherConfig
from environments.pipeline.sampling_check import training_sampling_problem
from judge.config import JudgeConfig

STUDENT_TOPK_MAX = 100
"""The largest `student_topk_k` the config takes; the policy server's own `--max-logprobs` is checked
at setup (environments/delivery/student_topk_check.py)."""


class _EnvKnobs(BaseEnvConfig):
    """The env's own knobs (tasks, rollouts, reward, I/O); the OPD knobs are added from their
    declarations in `OPDConfig`, `JudgeConfig` and `TeacherConfig` (see `OPD_GROUPS`)."""

    model_config = ConfigDict(extra="forbid")

    wandb_name: str | None = Field(
        default="agentic-opd",
        description="Name in wandb and the env's name at the Atropos API (`/register-env` needs one).",
    )
    # -- tasks -----------------------------------------------------------------------------------
    task_source: Literal["builtin", "conventions", "jsonl", "hf", "dirs"] = Field(
        default="builtin",
        description="Where tasks come from: the built-in coding tasks, the convention task family of the "
        "learning benchmark (its own train / held-out split; eval_fraction is not used), a JSONL file "
        "(.jsonl or .jsonl.gz), a datasets dataset, or a directory of task directories (docs/tasks.md).",
    )
    task_path: str | None = Field(
        default=None, description="JSONL path, datasets name / local path for `hf`, or the root for `dirs`."
    )
    task_test_format: Literal["auto", "data", "code", "stdio"] = Field(
        default="auto",
        description="Shape of the hidden tests: data-style, the dataset's own test code, or stdin/stdout "
        "cases (docs/tasks.md); `auto` tells them apart by type.",
    )
    task_split: str = Field(default="train", description="Dataset split for `hf`.")
    task_field_map: dict[str, str] = Field(
        default_factory=dict,
        description="Maps task fields (task_id, prompt, hidden_tests, entry_point, test_context, public_tests, "
        "...) to dataset columns.",
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
    allow_biased_sampling: bool = Field(
        default=False,
        description="Allow training rollouts at temperature != 1 or top_p < 1. The trainers compare raw "
        "(temperature-1) logprobs, so such rollouts bias the GRPO ratio and the OPD gradient "
        "(environments/pipeline/sampling_check.py, docs/trainers.md).",
    )
    policy_lora_prefix: str | None = Field(
        default=None,
        description="Sample each group with the newest LoRA adapter `<prefix>-step<N>` the policy server "
        "lists (the torch trainer's weight_sync lora_naming per_step) and record N as the group's "
        "policy_version; the teacher scores with it too when it shares the policy's server. "
        "null: always the configured model.",
    )
    student_topk_k: int = Field(
        default=0,
        ge=0,
        le=STUDENT_TOPK_MAX,
        description="Ask the policy server for its own top-K (`logprobs: K`) at every generated token and "
        'record the rows into groups as `overrides[seq]["student_topk"]` (docs/distill-format.md, '
        '"Student top-K"), for the trainers\' `opd_vocab: student_topk | overlap | union`. 0: off. '
        "The policy vLLM must allow K logprobs (`--max-logprobs`, vLLM's default 20); setup checks it.",
    )
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
        description="When tests fail, append the verifier's feedback (counts; details of public tests only, "
        "docs/tasks.md) as a final user message so the last turn has a next state to learn from.",
    )
    public_test_fraction: float = Field(
        default=0.0,
        ge=0.0,
        le=1.0,
        description="Share of the tests a task does not mark public that are public anyway (chosen by a stable "
        "hash). Failures of public tests are described to the agent, answers included; hidden ones only counted.",
    )
    efficiency_shaping: float = Field(
        default=0.0,
        ge=0.0,
        le=1.0,
        description="Score = pass_fraction * (1 - w * turns_used / max_turns); 0 disables shaping.",
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

    @model_validator(mode="before")
    @classmethod
    def _nested_opd_block(cls, data: Any) -> Any:
        """Take the proxy's `opd:` shape too (`opd: {judge: {m: 5}}` is `judge_votes: 5`): the one OPD
        config shape of both producers. A flat name already set to a value other than its default
        wins, as a `--env.*` flag wins over the YAML (atroposlib merges defaults, YAML and flags into
        one dict before this runs)."""
        if not isinstance(data, dict) or "opd" not in data:
            return data
        data = dict(data)
        nested = data.pop("opd") or {}
        if not isinstance(nested, dict):
            raise ValueError("opd must be a mapping shaped like OPDConfig (judge, teacher, prm, ...)")
        for name, value in flatten_values(OPD_GROUPS, nested).items():
            field = cls.model_fields.get(name)
            default = field.get_default(call_default_factory=True) if field is not None else None
            if name not in data or data[name] == default:
                data[name] = value
        return data

    @model_validator(mode="after")
    def _training_sampling_is_unbiased(self) -> _EnvKnobs:
        problem = training_sampling_problem(self.temperature, self.top_p)
        if problem and not self.allow_biased_sampling:
            raise ValueError(problem)
        return self

    @model_validator(mode="after")
    def _nested_opd_config_is_valid(self) -> _EnvKnobs:
        """Run the nested models' own validators (e.g. a judge quorum above m) at construction."""
        if type(self) is not _EnvKnobs:
            self.opd_config()
        return self

    def opd_config(self) -> OPDConfig:
        """The nested pipeline config that the flat OPD knobs describe."""
        return nest_values(OPDConfig, OPD_GROUPS, dict(self))  # type: ignore[return-value]


OPD_GROUPS = [
    FlatGroup(OPDConfig, renames={"enabled": "opd_enabled"}),
    FlatGroup(
        JudgeConfig,
        path=("judge",),
        prefix="judge_",
        renames={"m": "judge_votes", "vote_policy": "vote_policy", "hint_choice": "hint_choice"},
        exclude=frozenset({"api_key"}),  # secrets stay out of YAML and printed configs: use api_key_env
    ),
    FlatGroup(
        TeacherConfig,
        path=("teacher",),
        prefix="teacher_",
        renames={"check_tokenizer": "check_teacher_tokenizer"},
        exclude=frozenset({"api_key"}),
    ),
    FlatGroup(PRMConfig, path=("prm",), prefix="prm_"),
    FlatGroup(
        JudgeConfig,
        path=("prm", "judge"),
        prefix="prm_judge_",
        renames={"m": "prm_votes"},
        # secrets stay out of YAML; the hint-only knobs have no meaning for a +1 / 0 / -1 verdict
        exclude=frozenset({"api_key", "hint_choice", "min_hint_chars"}),
    ),
]
"""How the pipeline's nested config is exposed flat: `--env.judge_votes 5` is `JudgeConfig.m`,
`--env.teacher_timeout_s` is `TeacherConfig.timeout_s`, `--env.prm_enabled true` turns the
process-reward judge on and `--env.prm_votes 3` is its m, and so on; every field keeps its one
declaration (default, bounds, description) in its own model."""


AgenticOPDConfig = create_model(
    "AgenticOPDConfig",
    __base__=_EnvKnobs,
    __module__=__name__,
    __doc__="Tool-using coding rollouts with hindsight-guided on-policy distillation: the env's knobs "
    "plus every OPD pipeline knob, flat, so that Atropos' `--env.*` flags reach each one.",
    **flat_fields(OPD_GROUPS),
)
