"""Build an `AgenticOPDEnv` wired to the dev server (shared by integration tests). Every env made
here is closed after its test (`close_made_envs`, autouse in tests/conftest.py): an env left open
keeps its HTTP sessions until exit, since `setup()` freezes the heap."""

from __future__ import annotations

from environments.atropos.agentic_opd_env import AgenticOPDEnv

MADE: list[AgenticOPDEnv] = []
"""Envs made by `make_env` during the current test."""


def make_env(dev_server, tmp_path, **overrides) -> AgenticOPDEnv:
    config, servers = AgenticOPDEnv.config_init()
    config.tokenizer_name = str(dev_server.model_dir)
    config.include_messages = True
    config.metrics_path = str(tmp_path / "metrics.jsonl")
    config.rollout_wall_clock_s = 120
    for key, value in overrides.items():
        setattr(config, key, value)
    servers[0].base_url = dev_server.base_url
    servers[0].model_name = dev_server.model_name
    servers[0].tokenizer_name = str(dev_server.model_dir)
    env = AgenticOPDEnv(config, servers)
    MADE.append(env)
    return env


async def close_made_envs() -> None:
    while MADE:
        await MADE.pop().close()


class CapturingSampler:
    """Records every (prompt ids, generated ids, logprobs) the policy server returned."""

    def __init__(self, env: AgenticOPDEnv) -> None:
        self.calls: list[tuple[list[int], list[int], list[float]]] = []
        self._inner = env.server.tokens_and_logprobs_completion
        env.server.tokens_and_logprobs_completion = self

    async def __call__(self, **kwargs):
        prompt = list(kwargs["input_ids"])
        result = await self._inner(**kwargs)
        self.calls.append((prompt, list(result[1][0]), list(result[2][0])))
        return result
