"""Rollouts are true samples of the policy even when the model's generation_config.json truncates.

vLLM fills every sampling parameter a request leaves out from the model's generation_config.json.
On a copy of the dev model whose config says `top_k: 1`, a request that sends only temperature 1
and top_p 1 is greedy: one distinct completion in 8 seeds. The rollout client sends every parameter
(hermes_opd/vllm_api/sampling_params.py), so its samples on that copy are, seed for seed, the samples
of the plain dev model, which the session's dev vLLM serves (one vLLM per model per session).
The tests of its parts that need no server: tests/unit/test_sampling_params.py."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from hermes_opd.devkit.dev_server import DevServer
from hermes_opd.vllm_api.client import VLLMCompletionsClient

SEEDS = range(8)
MAX_TOKENS = 12


def _prompt(tokenizer) -> list[int]:
    messages = [{"role": "user", "content": "Write solution.py that prints the sum of two numbers."}]
    return tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_dict=False)


async def _client_samples(server: DevServer, prompt: list[int]) -> list[tuple[int, ...]]:
    client = VLLMCompletionsClient(base_url=server.base_url, model=server.model_name, timeout_s=120)
    try:
        samples = []
        for seed in SEEDS:  # one at a time: the same batch shape on both servers
            (sequence,) = await client.generate(prompt, n=1, max_tokens=MAX_TOKENS, seed=seed)
            samples.append(tuple(sequence.token_ids))
        return samples
    finally:
        await client.close()


def _bare_samples(server: DevServer, prompt: list[int]) -> list[tuple[int, ...]]:
    """Requests like ours before the fix: temperature 1, top_p 1, nothing else."""
    samples = []
    with httpx.Client(timeout=120) as http:
        for seed in SEEDS:
            body = {
                "model": server.model_name,
                "prompt": prompt,
                "max_tokens": MAX_TOKENS,
                "temperature": 1.0,
                "top_p": 1.0,
                "seed": seed,
                "return_token_ids": True,
            }
            response = http.post(f"{server.base_url}/completions", json=body)
            response.raise_for_status()
            samples.append(tuple(response.json()["choices"][0]["token_ids"]))
    return samples


@pytest.mark.integration
def test_truncating_generation_config_does_not_truncate_rollouts(dev_server, plain_dev_server, dev_tokenizer):
    """`plain_dev_server` (tests/conftest.py) serves a copy of the dev model whose
    generation_config.json says top_k 1, top_p 0.5 and repetition_penalty 1.3."""
    prompt = _prompt(dev_tokenizer)
    plain_samples = asyncio.run(_client_samples(dev_server, prompt))
    bare = _bare_samples(plain_dev_server, prompt)
    ours = asyncio.run(_client_samples(plain_dev_server, prompt))

    assert len(set(bare)) == 1, "the copy's generation config should make bare requests greedy"
    assert len(set(plain_samples)) >= 4, f"the plain dev model should sample diversely: {plain_samples}"
    assert ours == plain_samples
