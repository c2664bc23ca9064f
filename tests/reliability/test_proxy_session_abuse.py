"""`hermes-opd proxy` sessions under misuse, through the real proxy in front of the dev vLLM: a
request vLLM refuses leaves its session as it was (the retry continues it); a side call with the
main session's header, a no-train request re-sending a training history and a second client with
the same history never take a session's turn; one key at its cap pushes out only its own sessions;
ending a session returns its memory. docs/proxy/sessions.md."""

from __future__ import annotations

import aiohttp
import openai
import pytest
from openai import AsyncOpenAI

from tests.support.proxy_factory import first_messages, next_state, proxy_config, running_proxy

pytestmark = [pytest.mark.integration, pytest.mark.reliability]


async def chat(client, messages, headers=None, **kwargs):
    params = {"model": "dev-model", "messages": messages, "max_tokens": 8, "temperature": 0.7, **kwargs}
    answer = await client.chat.completions.create(**params, extra_headers=headers)
    return answer.choices[0].message


async def test_a_request_vllm_refuses_leaves_the_session_as_it_was(dev_server, tmp_path):
    """The wedge: once, the user's message entered the record before the policy call; a refused call
    left the record half-updated and every later request of the session failed until it idled out."""
    async with running_proxy(proxy_config(dev_server, tmp_path)) as (url, server):
        client = AsyncOpenAI(base_url=url, api_key="x", max_retries=0)
        headers = {"X-Session-Id": "wedge"}
        m1 = first_messages()
        r1 = await chat(client, m1, headers)
        m2 = m1 + next_state(r1)
        with pytest.raises(openai.BadRequestError):
            await chat(client, m2, headers, max_tokens=10**7)  # vLLM: max_tokens over the context
        r2 = await chat(client, m2, headers)
        await chat(client, m2 + next_state(r2), headers)
        counts = server.counts
    assert counts["turns_finished"] == 2 and not any(k.startswith("forks_") for k in counts)


async def test_a_side_call_with_the_main_sessions_header_takes_nothing_from_it(dev_server, tmp_path):
    async with running_proxy(proxy_config(dev_server, tmp_path)) as (url, server):
        client = AsyncOpenAI(base_url=url, api_key="x", max_retries=0)
        headers = {"X-Claude-Code-Session-Id": "4f1c9a2e-main"}
        m1 = first_messages()
        r1 = await chat(client, m1, headers)
        await chat(client, [{"role": "user", "content": "Write a 5-word title for: total of 1..10"}], headers)
        await chat(client, m1 + next_state(r1), headers)
        counts, sessions = server.counts, len(server.sessions)
    assert counts["turns_finished"] == 1 and sessions == 1
    assert not [k for k in counts if k.startswith(("turns_dropped", "turns_ended", "sessions_ended"))]


async def test_a_no_train_request_never_continues_a_training_session_by_its_history(dev_server, tmp_path):
    async with running_proxy(proxy_config(dev_server, tmp_path)) as (url, server):
        client = AsyncOpenAI(base_url=url, api_key="x", max_retries=0)
        m1 = first_messages()
        r1 = await chat(client, m1)
        m2 = m1 + next_state(r1)
        await chat(client, m2, {"X-Hermes-Train": "false"})
        assert server.counts["turns_finished"] == 0 and server.counts["not_for_training"] == 1
        await chat(client, m2)
        counts, sessions = server.counts, len(server.sessions)
    assert counts["turns_finished"] == 1 and sessions == 1


async def test_two_clients_with_one_history_never_continue_each_others_session(dev_server, tmp_path):
    async with running_proxy(proxy_config(dev_server, tmp_path)) as (url, server):
        client = AsyncOpenAI(base_url=url, api_key="x", max_retries=0)
        m1 = first_messages()
        r1 = await chat(client, m1)
        shared = m1 + [r1.model_dump(exclude_none=True)]
        await chat(client, [*shared, {"role": "user", "content": "client A: now print it twice"}])
        await chat(client, [*shared, {"role": "user", "content": "client B: now sum 1..20"}])
        counts, sessions = server.counts, len(server.sessions)
    assert counts["turns_finished"] == 1 and counts["history_collisions"] == 1 and sessions == 2


async def test_one_key_at_its_cap_pushes_out_only_its_own_sessions(dev_server, tmp_path):
    config = proxy_config(
        dev_server, tmp_path, api_keys=["key-a", "key-b"], max_sessions=4, max_sessions_per_key=2
    )
    async with running_proxy(config) as (url, server):
        a = AsyncOpenAI(base_url=url, api_key="key-a", max_retries=0)
        b = AsyncOpenAI(base_url=url, api_key="key-b", max_retries=0)
        b_turns = []
        for i in range(2):
            messages = first_messages(f"task b{i}")
            b_turns.append((messages, await chat(b, messages, {"X-Session-Id": f"b{i}"})))
        for i in range(3):
            await chat(a, first_messages(f"task a{i}"), {"X-Session-Id": f"a{i}"})
        for i, (messages, reply) in enumerate(b_turns):  # key b's turns all still wait for it
            await chat(b, messages + next_state(reply), {"X-Session-Id": f"b{i}"})
        counts = server.counts
    assert (counts["sessions_evicted_key_cap"], counts["turns_evicted"], counts["turns_finished"]) == (
        1,
        1,
        2,
    )


async def test_ending_a_session_returns_every_token_it_held(dev_server, tmp_path):
    async with running_proxy(proxy_config(dev_server, tmp_path)) as (url, server):
        client = AsyncOpenAI(base_url=url, api_key="x", max_retries=0)
        m1 = first_messages()
        r1 = await chat(client, m1, {"session-id": "codex-1"})
        await chat(client, m1 + next_state(r1), {"session-id": "codex-1"})
        root = url.removesuffix("/v1")
        async with aiohttp.ClientSession() as http:
            before = await (await http.get(f"{root}/metrics.json")).json()
            deleted = await http.delete(f"{url}/sessions/codex-1")
            after = await (await http.get(f"{root}/metrics.json")).json()
    assert before["tokens_held"] > 0 and before["sessions"] == 1 and deleted.status == 200
    assert (after["tokens_held"], after["sessions"]) == (0, 0)
    assert after["counts"]["turns_ended_without_next_state_ended"] == 1


async def test_a_client_that_re_renders_our_reply_still_trains_that_turn(dev_server, tmp_path):
    """smolagents re-sends the assistant's turn as its own text (content parts, a "Calling tools:"
    suffix) and the next state as a `user` "Observation:" message."""
    async with running_proxy(proxy_config(dev_server, tmp_path)) as (url, server):
        client = AsyncOpenAI(base_url=url, api_key="x", max_retries=0)
        m1 = first_messages()
        r1 = await chat(client, m1, max_tokens=16, temperature=0.0, seed=7)
        assert r1.content and r1.content.strip() and not r1.tool_calls  # the dev model at temperature 0
        rerendered = {
            "role": "assistant",
            "content": [{"type": "text", "text": f"{r1.content}\nCalling tools:\n[]"}],
        }
        await chat(client, [*m1, rerendered, {"role": "user", "content": "Observation:\nexit code 0"}])
        counts = server.counts
    assert (counts["turns_finished"], counts["turns_finished_rerendered"]) == (1, 1)
