"""The agent dev model on a real CPU vLLM with a 64k context: the first request of a client's
conversation gets a valid call of one of the tools it offers (greedy and sampled, at 1k, 10k and 60k
prompt tokens), the tool result gets a short plain answer, the `llm` judge's prompt gets a parsed +1
with a hint, and the proxy with its DEFAULT judge writes groups whose turns are scored.

Timings are printed (`-s`): the first request at each length and the teacher's top-50 prompt
logprobs at 10k tokens."""

from __future__ import annotations

import json
import time
import urllib.request

import pytest
from openai import AsyncOpenAI

from environments.rollout.tool_calls import parse_tool_calls
from judge.parsing import parse_vote
from judge.prompt import SYSTEM_PROMPT
from tests.support.proxy_factory import proxy_config, read_groups, running_proxy
from tests.support.waiting import wait_for
from tests.unit.test_agent_chat_template import CLAUDE_CODE, CODEX

pytestmark = pytest.mark.integration


def _post(url: str, body: dict, timeout: float = 600) -> dict:
    request = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.loads(response.read())


def long_system_prompt(tokenizer, n_tokens: int) -> str:
    """Python's own sources, cut to about `n_tokens` tokens: a long client system prompt."""
    import sysconfig
    from pathlib import Path

    text = ""
    for path in sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py")):
        text += path.read_text(errors="replace")
        if len(text) > n_tokens * 6:
            break
    ids = tokenizer(text, add_special_tokens=False)["input_ids"][:n_tokens]
    return tokenizer.decode(ids)


def complete(server, prompt_ids: list[int], temperature: float, seed: int = 0) -> tuple[str, float]:
    started = time.monotonic()
    answer = _post(
        f"{server.base_url}/completions",
        {
            "model": server.model_name,
            "prompt": prompt_ids,
            "max_tokens": 300,
            "temperature": temperature,
            "seed": seed,
            "skip_special_tokens": False,
        },
    )
    return answer["choices"][0]["text"], time.monotonic() - started


@pytest.mark.parametrize("n_tokens", [1000, 10000, 60000])
def test_a_long_client_request_gets_a_call_then_a_plain_answer(agent_server, agent_tokenizer, n_tokens):
    system = long_system_prompt(agent_tokenizer, n_tokens)
    cases = [(CODEX, "shell", {"command": ["echo", "hi"]}), (CLAUDE_CODE, "Bash", {"command": "echo hi"})]
    for tools, name, arguments in cases if n_tokens < 60000 else cases[:1]:
        messages = [
            {"role": "system", "content": system},
            {"role": "user", "content": "List the files here."},
        ]
        prompt = agent_tokenizer.apply_chat_template(
            messages, tools=tools, add_generation_prompt=True, tokenize=True, return_dict=False
        )
        assert len(prompt) >= n_tokens
        for temperature in (0.0, 1.0):
            text, seconds = complete(agent_server, prompt, temperature)
            print(f"\n{len(prompt)} prompt tokens, {name}, T={temperature}: {seconds:.2f} s")
            parsed = parse_tool_calls(text.removesuffix("<|im_end|>"), {t["function"]["name"] for t in tools})
            assert [(c.name, c.arguments) for c in parsed.calls] == [(name, arguments)], text
        if n_tokens >= 60000:
            continue
        history = [
            *messages,
            {"role": "assistant", "content": text.removesuffix("<|im_end|>")},
            {"role": "tool", "content": "hi\n"},
        ]
        follow = agent_tokenizer.apply_chat_template(
            history, tools=tools, add_generation_prompt=True, tokenize=True, return_dict=False
        )
        answer, _ = complete(agent_server, follow, 1.0)
        assert answer.removesuffix("<|im_end|>") == "Done: the command ran."


def test_the_judge_prompt_gets_a_vote_with_a_hint(agent_server):
    async def votes():
        client = AsyncOpenAI(base_url=agent_server.base_url, api_key="x")
        out = []
        for seed in range(3):
            answer = await client.chat.completions.create(
                model=agent_server.model_name,
                temperature=0.7,
                max_tokens=256,
                seed=seed,
                messages=[
                    {"role": "system", "content": SYSTEM_PROMPT},
                    {"role": "user", "content": '<the_step>\n-> call shell(["ls"])\n</the_step>'},
                ],
            )
            out.append(parse_vote(answer.choices[0].message.content))
        return out

    import asyncio

    for vote in asyncio.run(votes()):
        assert vote.score == 1 and vote.hint and len(vote.hint) > 10


def test_the_teacher_scores_a_ten_thousand_token_prompt(agent_server, agent_tokenizer):
    ids = agent_tokenizer(long_system_prompt(agent_tokenizer, 10000), add_special_tokens=False)["input_ids"]
    started = time.monotonic()
    answer = _post(
        f"{agent_server.base_url.removesuffix('/v1')}/inference/v1/generate",
        {
            "model": agent_server.model_name,
            "token_ids": ids,
            "sampling_params": {"max_tokens": 1, "prompt_logprobs": 50, "detokenize": False},
        },
    )
    seconds = time.monotonic() - started
    rows = answer["prompt_logprobs"]
    print(f"\nteacher top-50 prompt logprobs over {len(ids)} tokens (generate path): {seconds:.1f} s")
    assert len(rows) == len(ids) and rows[0] is None
    assert all(len(row) >= 50 for row in rows[1:])


async def test_the_proxy_with_its_default_judge_writes_scored_turns(agent_server, agent_tokenizer, tmp_path):
    """The quick start's configuration: `opd` left at its defaults (an `llm` judge on the policy)."""
    config = proxy_config(agent_server, tmp_path, opd={}, samples_per_group=1)
    async with running_proxy(config) as (url, _server):
        client = AsyncOpenAI(base_url=url, api_key="x")
        for session in ("a", "b"):
            messages = [
                {"role": "system", "content": "You are a coding agent."},
                {"role": "user", "content": "Show me the files."},
            ]
            headers = {"X-Session-Id": session}
            first = await client.chat.completions.create(
                model=agent_server.model_name,
                messages=messages,
                tools=CODEX,
                max_tokens=300,
                extra_headers=headers,
            )
            message = first.choices[0].message
            assert first.choices[0].finish_reason == "tool_calls"
            assert [(c.function.name, json.loads(c.function.arguments)) for c in message.tool_calls] == [
                ("shell", {"command": ["echo", "hi"]})
            ]
            messages += [message.model_dump(exclude_none=True)] + [
                {"role": "tool", "tool_call_id": c.id, "content": "hi\n"} for c in message.tool_calls
            ]
            second = await client.chat.completions.create(
                model=agent_server.model_name,
                messages=messages,
                tools=CODEX,
                max_tokens=300,
                extra_headers={**headers, "X-Session-End": "true"},
            )
            assert second.choices[0].message.content == "Done: the command ran."
        groups_path = tmp_path / "groups.jsonl"
        await wait_for(lambda: len(read_groups(groups_path)) >= 2, 300, "two groups from two sessions")
    turns = [t for g in read_groups(groups_path) for o in g["overrides"] for t in o["opd"]["turns"]]
    scored = [t for t in turns if t["status"] == "scored"]
    assert scored and all(t["hint"] for t in scored), turns
    rows = sum(1 for g in read_groups(groups_path) for seq in g["distill_token_ids"] for row in seq if row)
    assert rows > 0
