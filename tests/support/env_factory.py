"""Build an `AgenticOPDEnv` wired to the dev server (shared by integration tests). Every env made
here, and every server passed to `close_after_test`, is closed after its test (`close_made`,
autouse in tests/conftest.py): one left open keeps its HTTP sessions, until exit when `setup()` froze
the heap, and the session fails on it."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

from environments.atropos.agentic_opd_env import AgenticOPDEnv
from environments.atropos.server import CurrentVLLMServer

CLOSERS: list[Callable[[], Awaitable[object]]] = []
"""What the current test opened and `close_made` closes after it."""


def close_after_test(closer: Callable[[], Awaitable[object]]) -> None:
    CLOSERS.append(closer)


async def close_server(server: CurrentVLLMServer) -> None:
    """Stop a server class's health task and close its HTTP clients (what the env's close does)."""
    task = getattr(server, "check_task", None)
    if task is not None:
        task.cancel()
        with contextlib.suppress(BaseException):
            await task
    await server.client.close()
    await server.openai.close()


async def close_made() -> None:
    while CLOSERS:
        await CLOSERS.pop()()
    await asyncio.sleep(0)


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
    close_after_test(env.close)
    return env


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
