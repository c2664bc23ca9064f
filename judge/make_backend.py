"""Make the judge backend that a `JudgeConfig` names."""

from __future__ import annotations

from hermes_opd.vllm_api.endpoint import Endpoint
from judge.backends import JudgeBackend, JudgeKind
from judge.config import JudgeConfig


def make_judge_backend(
    config: JudgeConfig, server: Endpoint | None = None, kind: JudgeKind = "hint"
) -> JudgeBackend:
    """The backend that `config.backend` names, for the hint judge (`kind="hint"`) or the
    process-reward judge (`kind="prm"`: judge/prm_prompt.py, judge/prm_rules_backend.py).

    For `llm`, `server` is the judge's resolved endpoint (the env resolves it, with the fallback to
    the policy server, in environments/pipeline/role_servers.py); without one, the config's own
    `base_url`, `model` and key are used."""
    if config.backend == "rules" and kind == "prm":
        from judge.prm_rules_backend import ProcessRulesBackend

        return ProcessRulesBackend(config)
    if config.backend == "rules":
        from judge.rules_backend import RulesJudgeBackend

        return RulesJudgeBackend(config)
    if config.backend == "constant":
        from judge.constant_backend import ConstantHintJudgeBackend

        return ConstantHintJudgeBackend(config)
    if config.backend == "redacted":
        from judge.redacted_backend import RedactedHintJudgeBackend

        return RedactedHintJudgeBackend(config)
    if config.backend == "llm":
        from judge.llm_backend import LLMJudgeBackend

        if server is None:
            if not config.base_url or not config.model:
                raise ValueError(
                    "the llm judge needs a base_url and a model: set judge.base_url/judge.model, "
                    "or pass its resolved server"
                )
            server = Endpoint(config.base_url, config.model, config.resolved_api_key())
        return LLMJudgeBackend(
            config, base_url=server.base_url, model=server.model, api_key=server.api_key or "EMPTY", kind=kind
        )
    raise ValueError(f"unknown judge backend {config.backend!r}")
