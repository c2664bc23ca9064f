"""Make the judge backend that a `JudgeConfig` names."""

from __future__ import annotations

from judge.backends import JudgeBackend
from judge.config import JudgeConfig


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
