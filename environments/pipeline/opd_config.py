"""Configuration of the OPD pipeline (judge, teacher, packing), as one pydantic model."""

from __future__ import annotations

import os
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from judge.config import JudgeConfig


class TeacherConfig(BaseModel):
    """Where the teacher runs. It must share the policy's tokenizer (checked at startup)."""

    model_config = ConfigDict(extra="forbid")

    base_url: str | None = Field(default=None, description="vLLM base URL (…/v1). None: the policy server.")
    model: str | None = Field(default=None, description="Served model name. None: the policy's model.")
    api_key: str | None = Field(
        default=None,
        description="API key of the teacher's own server. None falls back to `api_key_env`; a teacher "
        "without its own base_url uses the policy server's key (docs/roles.md).",
    )
    api_key_env: str | None = Field(
        default=None, description="Name of an environment variable that holds the API key (kept out of YAML)."
    )
    concurrency: int = Field(
        default=32,
        ge=1,
        description="Teacher requests in flight at once (also the in-process path's largest batch).",
    )
    max_positions_in_flight: int = Field(
        default=65536,
        ge=1,
        description="Sum of the prompt lengths of the teacher requests in flight (vLLM paths). A top-50 "
        "response is about 3.7 KB per position, so 65536 bounds the bodies in flight to ~240 MB whatever "
        "the context length; one request longer than this runs alone.",
    )
    timeout_s: float = Field(
        default=120.0, gt=0, description="Timeout of one teacher request, retries included."
    )
    max_attempts: int = Field(
        default=3, ge=1, description="Attempts per request on transient errors (5xx, timeouts)."
    )
    check_tokenizer: bool = Field(
        default=True, description="Compare the teacher's tokenizer with the policy's at startup."
    )
    path: Literal["auto", "transformers", "generate", "completions"] = Field(
        default="auto",
        description="How the teacher scores a turn (docs/scaling.md): `generate` (vLLM /inference/v1/generate, "
        "needs --enable-scale-out), `completions` (/v1/completions, any vLLM), `transformers` (in-process "
        "from local_model_dir, a prefill's cost). `auto`: transformers if local_model_dir is set, else "
        "generate if the server has it, else completions.",
    )
    local_model_dir: str | None = Field(
        default=None,
        description="The teacher's weights on this machine, for the in-process `transformers` path.",
    )

    def resolved_api_key(self) -> str | None:
        """The teacher's own key: `api_key`, else the environment variable `api_key_env`, else None."""
        if self.api_key:
            return self.api_key
        if self.api_key_env and os.environ.get(self.api_key_env):
            return os.environ[self.api_key_env]
        return None


class PRMConfig(BaseModel):
    """The process-reward judge (Binary RL, docs/process-reward.md): every assistant turn with a next
    state scored +1 / -1 / 0 by m votes, carried to the trainers in `advantages`."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = Field(
        default=False,
        description="Score every turn with the process-reward judge and send the scores as the groups' "
        "`advantages` (docs/distill-format.md, Process reward). Off: the groups are unchanged.",
    )
    at_least_one_effective: bool = Field(
        default=True,
        description="When no turn of a rollout (a session) has a non-zero score yet, its first scored "
        "turn enters the PRM term anyway, with advantage 0 (OpenClaw-RL's at least one effective sample "
        "per session). False: only turns with a non-zero score enter it.",
    )
    judge: JudgeConfig = Field(
        default_factory=JudgeConfig,
        description="The process judge's backend, endpoint and votes (`m`, `vote_policy`, `quorum`); "
        "`llm` without a base_url uses the hint judge's server, else the policy server.",
    )

    @model_validator(mode="after")
    def _vote_policy_decides_a_score(self) -> PRMConfig:
        if self.judge.vote_policy == "any":
            raise ValueError("prm judge vote_policy 'any' does not decide a +1/0/-1 score; use majority")
        return self


class OPDConfig(BaseModel):
    """The hindsight OPD pipeline: turn pairs -> voted hints -> teacher scoring -> distill fields."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = Field(default=True, description="Run OPD; when False only GRPO data is emitted.")
    distill_topk: int = Field(
        default=50, ge=1, le=1000, description="K of the teacher's top-K prompt logprobs."
    )
    distill_mode: Literal["topk", "dense_k1"] = Field(
        default="topk",
        description="`topk`: the contract rows. `dense_k1`: one entry per position for stock tinker-atropos "
        "(see docs/distill-format.md).",
    )
    hint_max_next_state_chars: int = Field(
        default=4000,
        ge=100,
        description="Each tool result / user message shown to the judge is cut to this length.",
    )
    judge_concurrency: int = Field(
        default=32, ge=1, description="Turn pairs being judged at once (each sends the judge's m votes)."
    )
    send_equal_score_groups_with_distill: bool = Field(
        default=True,
        description="Send a group whose scores are all equal when it carries teacher rows (its OPD term "
        "still trains); atroposlib would drop it.",
    )
    judge: JudgeConfig = Field(default_factory=JudgeConfig, description="Judge backend and vote policy.")
    teacher: TeacherConfig = Field(default_factory=TeacherConfig, description="Teacher endpoint.")
    prm: PRMConfig = Field(
        default_factory=PRMConfig, description="The process-reward judge (off by default)."
    )
