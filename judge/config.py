"""Judge configuration: one pydantic model, every field described."""

from __future__ import annotations

import os
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

DEFAULT_EXIT_CODE_PATTERN = r"(?i)\b(?:exit(?:ed with)?\s+(?:code|status)|returncode)\s*[:=]?\s*(-?\d+)"
"""Matches `exit code 1`, `exit code: 1`, `exit status 2`, `exited with code 3`, `returncode=1`.
Group 1 is the code. Our tool results end with `exit code N`."""

VotePolicyName = Literal["majority", "majority_of_parsed", "any"]
HintChoiceName = Literal["representative", "longest", "shortest", "teacher_overlap", "token_optimal"]
ConstantHintTurns = Literal["failed", "every"]
DEFAULT_CONSTANT_HINT = "Check your work carefully."


class JudgeConfig(BaseModel):
    """How the hindsight judge runs: which backend, where it is, and how votes are counted."""

    model_config = ConfigDict(extra="forbid")

    backend: Literal["llm", "rules", "constant", "redacted"] = Field(
        default="llm",
        description="`llm`: an LLM over any OpenAI-compatible chat endpoint. `rules`: deterministic, "
        "offline hints from tracebacks, failed assertions, exit codes and failing tests. `constant`: "
        "a control that carries no information: the same sentence (`constant_hint`) on the turns "
        "`constant_hint_turns` names (judge/constant_backend.py). `redacted`: a control that keeps the "
        "rules hint's words and removes the values it quotes (judge/redacted_backend.py).",
    )
    base_url: str | None = Field(
        default=None,
        description="OpenAI-compatible base URL of the judge, e.g. http://127.0.0.1:8000/v1. "
        "None means: use the policy server.",
    )
    model: str | None = Field(
        default=None, description="Model name sent to the judge endpoint. None means: the policy's model."
    )
    api_key: str | None = Field(
        default=None,
        description="API key for the judge endpoint. None falls back to `api_key_env`, then to 'EMPTY' "
        "(what vLLM accepts when it runs without a key).",
    )
    api_key_env: str | None = Field(
        default=None, description="Name of an environment variable that holds the API key (kept out of YAML)."
    )
    m: int = Field(default=3, ge=1, le=32, description="Number of judge votes per turn.")
    temperature: float = Field(default=0.7, ge=0.0, le=2.0, description="Sampling temperature of each vote.")
    max_tokens: int = Field(
        default=2048,
        ge=1,
        description="Completion token limit per vote; large enough for models that think before answering.",
    )
    timeout_s: float = Field(default=60.0, gt=0.0, description="Timeout of one HTTP attempt, in seconds.")
    turn_deadline_s: float | None = Field(
        default=150.0,
        gt=0.0,
        description="Wall-clock limit for all m votes of one turn, retries included. Votes still running "
        "then count as failed (unparsed) and the finished ones still count. Keep it below the pipeline's "
        "per-turn judge timeout so that partial results survive. None: no limit.",
    )
    max_retries: int = Field(
        default=3,
        ge=0,
        description="Retries per vote on transient errors (timeouts, connection errors, 5xx, 429). "
        "Other 4xx answers are never retried.",
    )
    backoff_base_s: float = Field(
        default=0.5, ge=0.0, description="First retry delay; doubles on every further retry (with jitter)."
    )
    backoff_max_s: float = Field(default=8.0, ge=0.0, description="Upper bound of one backoff delay.")
    retry_after_cap_s: float = Field(
        default=30.0, ge=0.0, description="Upper bound on how long a 429's Retry-After header is honoured."
    )
    extra_body: dict[str, Any] = Field(
        default_factory=dict,
        description="Extra JSON fields for each request, e.g. "
        '{"chat_template_kwargs": {"enable_thinking": false}} for vLLM.',
    )
    vote_policy: VotePolicyName = Field(
        default="majority",
        description="`majority`: accept when at least `quorum` of the m votes requested are +1 (a failed "
        "or unparsed vote counts as not-yes). `majority_of_parsed`: more than half of the votes that "
        "parsed (the earlier rule). `any`: the reference behaviour, one +1 vote with a valid hint wins.",
    )
    quorum: int | None = Field(
        default=None,
        ge=1,
        description="`majority` only: +1 votes needed out of m. None: a strict majority, m // 2 + 1.",
    )
    hint_choice: HintChoiceName = Field(
        default="representative",
        description="Which positive vote's hint is used. `representative`: the hint with the highest mean "
        "word-set overlap with the other positive hints; ties (always, with two) go to the hint with more "
        "distinct words, then to the earlier vote. `longest`: the reference behaviour (most characters). "
        "`shortest`: fewest characters. `teacher_overlap` (OpenClaw-RL's sequence_optimal): the teacher scores "
        "every candidate; the one whose teacher top-K overlaps most with the student's top-K over the turn "
        "wins. `token_optimal`: the candidate with the best overlap at the most positions. Both teacher "
        "policies favour small corrections (judge/hint_choice.py).",
    )
    min_hint_chars: int = Field(
        default=11,
        ge=0,
        description="Hints shorter than this (after stripping whitespace) do not count. The default 11 "
        "is the reference's rule: more than 10 characters.",
    )
    context_char_budget: int = Field(
        default=6000,
        ge=200,
        description="Characters of conversation context shown to the judge; older messages are cut first "
        "(the task's first user message is kept, itself shortened if needed).",
    )
    turn_char_budget: int = Field(
        default=4000,
        ge=100,
        description="Characters of the judged assistant turn shown to the judge (middle elided if longer).",
    )
    next_state_char_budget: int = Field(
        default=4000,
        ge=100,
        description="Characters of the next state shown to the judge (middle elided, so both the start "
        "and the end of an error output stay visible).",
    )
    rules_exit_code_pattern: str = Field(
        default=DEFAULT_EXIT_CODE_PATTERN,
        description="Regex (rules backend) that finds a command's exit code in a tool result; "
        "group 1 must capture the integer code.",
    )
    rules_quote_user_feedback: bool = Field(
        default=False,
        description="Rules backend: a `role: user` reply in the next state that is not a plain acceptance "
        "becomes a hint, quoted (after any failure finding). For live sessions behind the proxy, where "
        "the user is a person; in the env the user messages are the verifier's.",
    )

    constant_hint: str = Field(
        default=DEFAULT_CONSTANT_HINT,
        min_length=1,
        description="`constant` backend only: the hint every hinted turn gets, whatever went wrong.",
    )
    constant_hint_turns: ConstantHintTurns = Field(
        default="failed",
        description="`constant` backend only. `failed`: the turns the `rules` backend would hint (a "
        "failure signal in the next state), so only the hint's text differs from `rules`. `every`: "
        "every turn that has a next state, successful ones too.",
    )

    @model_validator(mode="after")
    def _quorum_fits_m(self) -> JudgeConfig:
        if self.quorum is not None and self.quorum > self.m:
            raise ValueError(f"quorum={self.quorum} is more than the m={self.m} votes requested")
        return self

    @field_validator("rules_exit_code_pattern")
    @classmethod
    def _pattern_has_code_group(cls, value: str) -> str:
        compiled = re.compile(value)
        if compiled.groups < 1:
            raise ValueError("rules_exit_code_pattern needs a capturing group for the exit code")
        return value

    def resolved_api_key(self) -> str:
        """The key to send: `api_key`, else the environment variable `api_key_env`, else 'EMPTY'."""
        if self.api_key:
            return self.api_key
        if self.api_key_env and os.environ.get(self.api_key_env):
            return os.environ[self.api_key_env]
        return "EMPTY"
