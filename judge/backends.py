"""What a judge backend is, and how one is made from a `JudgeConfig`."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from hermes_opd.turn_pairs import TurnPair
from judge.config import JudgeConfig
from judge.parsing import Vote


class JudgeError(RuntimeError):
    """No vote of a turn could be obtained (every request failed). The caller counts it and moves on."""

    def __init__(self, message: str, errors: list[str] | None = None) -> None:
        super().__init__(message)
        self.errors: list[str] = list(errors or [])
        self.latency_s: float | None = None
        """Set by `judge_turn`: how long the failed attempt took."""


@runtime_checkable
class JudgeBackend(Protocol):
    """Produces the m votes for one turn pair."""

    name: str

    async def collect_votes(self, pair: TurnPair) -> list[Vote]:
        """Exactly `config.m` votes. A vote whose request failed comes back as `Vote.failure(...)`
        (counted as unparsed); when every request failed, raise `JudgeError` instead."""
        ...

    async def aclose(self) -> None:
        """Release connections; the backend is not used afterwards."""
        ...


def make_judge_backend(
    config: JudgeConfig,
    *,
    policy_base_url: str | None = None,
    policy_model: str | None = None,
    policy_api_key: str | None = None,
) -> JudgeBackend:
    """The backend that `config.backend` names.

    For `llm`, `config.base_url`/`config.model` win; where they are None the policy server's are
    used (the `policy_*` arguments), so the judge can run on the policy pool or on its own endpoint.
    """
    if config.backend == "rules":
        from judge.rules_backend import RulesJudgeBackend

        return RulesJudgeBackend(config)
    if config.backend == "llm":
        from judge.llm_backend import LLMJudgeBackend

        base_url = config.base_url or policy_base_url
        model = config.model or policy_model
        if not base_url or not model:
            raise ValueError(
                "the llm judge needs a base_url and a model: set judge.base_url/judge.model, "
                "or pass the policy server's"
            )
        api_key = config.resolved_api_key()
        if config.base_url is None and not (config.api_key or config.api_key_env) and policy_api_key:
            api_key = policy_api_key
        return LLMJudgeBackend(config, base_url=base_url, model=model, api_key=api_key)
    raise ValueError(f"unknown judge backend {config.backend!r}")
