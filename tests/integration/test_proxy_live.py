"""`hermes-opd proxy` against the real dev vLLM server, driven by the official `openai` client:
the same answers as vLLM itself, exact samples with exact teacher rows, history edits, sessions
that end, 16 concurrent sessions, opt-outs and keys."""

from __future__ import annotations

import asyncio
import json

import openai
import pytest
from openai import AsyncOpenAI

from environments.rollout.tool_calls import parse_tool_calls
from hermes_opd.commands.validate import main as validate_main
from hermes_opd.contract.constants import MASKED
from hermes_opd.contract.validation import validate_group
from tests.support.oracle import token_logprobs
from tests.support.proxy_factory import (
    TOOLS,
    TRACEBACK,
    USER,
    ask,
    capture_generations,
    check_teacher_rows,
    first_messages,
    next_state,
    proxy_config,
    read_groups,
    running_proxy,
)
from tests.support.waiting import wait_for

pytestmark = pytest.mark.integration


async def seed_with_a_tool_call(direct: AsyncOpenAI, model: str) -> int:
    """The first seed at which the dev model writes a well-formed call of a known tool."""
    for seed in range(60):
        answer = await direct.chat.completions.create(
            model=model,
            messages=first_messages(),
            tools=TOOLS,
            tool_choice="none",
            seed=seed,
            max_tokens=96,
            temperature=0.7,
        )
        if parse_tool_calls(answer.choices[0].message.content, {"run_python", "write_file"}).valid_calls:
            return seed
    pytest.fail("the dev model wrote no well-formed tool call in 60 seeds")


async def test_same_answer_through_the_proxy_as_from_vllm(dev_server, tmp_path):
    direct = AsyncOpenAI(base_url=dev_server.base_url, api_key="x")
    seed = await seed_with_a_tool_call(direct, dev_server.model_name)
    raw = await direct.chat.completions.create(
        model=dev_server.model_name,
        messages=first_messages(),
        tools=TOOLS,
        tool_choice="none",
        seed=seed,
        max_tokens=96,
        temperature=0.7,
    )
    text = raw.choices[0].message.content
    parsed = parse_tool_calls(text, {"run_python", "write_file"})
    async with running_proxy(proxy_config(dev_server, tmp_path, train=False)) as (url, server):
        generations = capture_generations(server)
        proxy = AsyncOpenAI(base_url=url, api_key="x")
        for stream in (False, True):
            plain, _ = await ask(proxy, first_messages(), stream=stream, seed=seed, tool_choice="none")
            assert (plain.content if not stream else plain["content"]) == text
            message, finish = await ask(proxy, first_messages(), stream=stream, seed=seed)
            calls = message.tool_calls if not stream else message["tool_calls"]
            got = [
                (c.function.name, json.loads(c.function.arguments))
                if not stream
                else (c["function"]["name"], json.loads(c["function"]["arguments"]))
                for c in calls
            ]
            assert got == [(c.name, c.arguments) for c in parsed.valid_calls]
            assert finish == "tool_calls"
        answer = await proxy.chat.completions.create(
            model="dev-model",
            messages=first_messages(),
            tools=TOOLS,
            tool_choice="none",
            seed=seed,
            max_tokens=96,
            temperature=0.7,
        )
        assert answer.usage.prompt_tokens == raw.usage.prompt_tokens
        assert answer.usage.completion_tokens == raw.usage.completion_tokens
    # nothing here is recorded for training, so the proxy asked vLLM for no logprobs (they cost it)
    assert len(generations) == 5 and all(ids and lps == [] for _, ids, lps in generations)


def check_sample_exact(group, seq, generations, reference_model):
    tokens, masks = group["tokens"][seq], group["masks"][seq]
    ((start, end),) = group["overrides"][seq]["turn_spans"]
    assert (tuple(tokens[:start]), tuple(tokens[start:end])) in {
        (tuple(p), tuple(i)) for p, i, _ in generations
    }
    lps = {(tuple(p), tuple(i)): lp for p, i, lp in generations}[
        (tuple(tokens[:start]), tuple(tokens[start:end]))
    ]
    assert group["inference_logprobs"][seq][start:end] == lps
    assert [i for i, m in enumerate(masks) if m != MASKED] == list(range(start, end))
    oracle = token_logprobs(reference_model, tokens)
    assert max(abs(lps[j] - oracle[start + j]) for j in range(end - start)) <= 1e-4


async def test_samples_are_exactly_what_the_policy_sampled(dev_server, tmp_path, reference_model, capsys):
    config = proxy_config(dev_server, tmp_path)
    async with running_proxy(config) as (url, server):
        generations = capture_generations(server)
        proxy = AsyncOpenAI(base_url=url, api_key="x")
        messages = first_messages()
        for turn in range(4):  # the fourth request is the third turn's next state
            message, _ = await ask(proxy, messages, session="exact", seed=turn)
            messages = messages + next_state(message)
    groups = read_groups(tmp_path / "groups.jsonl")
    samples = [(g, s) for g in groups for s in range(len(g["tokens"]))]
    assert sorted(g["overrides"][s]["proxy"]["turn"] for g, s in samples) == [0, 1, 2]
    teacher_rows = 0
    for group, seq in samples:
        assert validate_group(group) == []
        provenance = group["overrides"][seq]["proxy"]
        assert (provenance["session"], provenance["policy_version"], provenance["policy_lag"]) == (
            "exact",
            0,
            0,
        )
        check_sample_exact(group, seq, generations, reference_model)
        teacher_rows += check_teacher_rows(group, seq, reference_model)
    assert teacher_rows > 0, "the rules judge hints on the traceback: some turn must be scored"
    assert validate_main([str(tmp_path / "groups.jsonl")]) == 0


async def test_an_edited_history_trains_no_foreign_token(dev_server, tmp_path):
    async with running_proxy(proxy_config(dev_server, tmp_path)) as (url, server):
        generations = capture_generations(server)
        proxy = AsyncOpenAI(base_url=url, api_key="x")
        first, _ = await ask(proxy, first_messages(), session="edit", seed=1)
        edited = first.model_dump(exclude_none=True)
        edited["content"] = "I wrote it myself."  # the client rewrote the assistant's turn
        edited.pop("tool_calls", None)
        messages = [*first_messages(), edited, {"role": "user", "content": "No. " + TRACEBACK}]
        second, _ = await ask(proxy, messages, session="edit", seed=2)
        await ask(proxy, messages + next_state(second), session="edit", seed=3)
        counts = dict(server.counts)
    groups = read_groups(tmp_path / "groups.jsonl")
    # the edit starts a new branch (docs/proxy/sessions.md); turn 0 never gets its next state
    assert counts["forks_history_edited"] == 1
    assert [g["overrides"][0]["proxy"]["turn"] for g in groups] == [1]  # turn 0 lost its next state
    (group,) = groups
    (start, end) = group["overrides"][0]["turn_spans"][0]
    trained = [t for t, m in zip(group["tokens"][0], group["masks"][0], strict=True) if m != MASKED]
    assert trained == generations[1][1] and group["tokens"][0][:start] == generations[1][0]
    assert "I wrote it myself." in group["messages"][0][2]["content"]


async def test_sixteen_concurrent_sessions_each_give_their_sample(dev_server, tmp_path):
    config = proxy_config(dev_server, tmp_path, samples_per_group=4)
    async with running_proxy(config) as (url, server):
        generations = capture_generations(server)
        proxy = AsyncOpenAI(base_url=url, api_key="x")

        async def session(i: int) -> None:
            messages = first_messages(f"{USER} (task {i})")
            message, _ = await ask(proxy, messages, seed=i, max_tokens=24)  # no header: the fallback
            await ask(proxy, messages + next_state(message), seed=100 + i, max_tokens=24)

        await asyncio.gather(*(session(i) for i in range(16)))
        assert len(server.sessions.sessions) == 16
    groups = read_groups(tmp_path / "groups.jsonl")
    sessions = [o["proxy"]["session"] for g in groups for o in g["overrides"]]
    assert len(sessions) == 16 and len(set(sessions)) == 16
    sampled = {(tuple(p), tuple(i)) for p, i, _ in generations}
    for group in groups:
        assert validate_group(group) == []
        for seq, tokens in enumerate(group["tokens"]):
            ((start, end),) = group["overrides"][seq]["turn_spans"]
            assert (tuple(tokens[:start]), tuple(tokens[start:end])) in sampled


async def test_sessions_that_end_without_a_next_state_give_no_sample(dev_server, tmp_path):
    config = proxy_config(dev_server, tmp_path, session_idle_s=0.4)
    async with running_proxy(config) as (url, server):
        proxy = AsyncOpenAI(base_url=url, api_key="x")
        await proxy.chat.completions.create(
            model="dev-model",
            messages=first_messages(),
            max_tokens=8,
            extra_headers={"X-Session-Id": "last", "X-Session-End": "true"},
        )
        await ask(proxy, first_messages("another"), session="idle", max_tokens=8)

        def idle_ended() -> bool:
            return (
                bool(server.counts.get("turns_ended_without_next_state_idle"))
                and not server.sessions.sessions
            )

        await wait_for(idle_ended, 10, "the idle session did not end")  # idle after 0.4 s
        counts = dict(server.counts)
        assert server.sessions.sessions == {}
    assert counts["turns_ended_without_next_state_ended"] == 1
    assert counts["turns_ended_without_next_state_idle"] == 1
    assert read_groups(tmp_path / "groups.jsonl") == []


async def test_a_request_marked_not_for_training_enters_no_sample(dev_server, tmp_path):
    """An opt-out request is answered in a private session of its own (docs/proxy/sessions.md): it
    neither records its answer nor delivers the turn whose next state it carries, and no sample
    ever trains on the tokens it sampled."""
    async with running_proxy(proxy_config(dev_server, tmp_path, samples_per_group=1)) as (url, server):
        generations = capture_generations(server)
        proxy = AsyncOpenAI(base_url=url, api_key="x")
        private: list[tuple[list[int], list[int]]] = []
        for session in ("private", None):
            messages = first_messages(f"task of {session}")
            message, _ = await ask(proxy, messages, session=session, max_tokens=16)
            messages = messages + next_state(message)
            headers = {"X-Hermes-Train": "false", **({"X-Session-Id": session} if session else {})}
            submitted = server.feed.stats.submitted
            opted_out = await proxy.chat.completions.create(
                model="dev-model", messages=messages, tools=TOOLS, max_tokens=16, extra_headers=headers
            )
            private.append(generations[-1][:2])
            assert server.feed.stats.submitted == submitted  # the waiting turn was not delivered by it
            messages = messages + next_state(opted_out.choices[0].message)
            for _ in range(2):
                message, _ = await ask(proxy, messages, session=session, max_tokens=16)
                messages = messages + next_state(message)
        assert server.counts["not_for_training"] == 2
    for group in read_groups(tmp_path / "groups.jsonl"):
        for tokens, masks in zip(group["tokens"], group["masks"], strict=True):
            start = next(i for i, m in enumerate(masks) if m != MASKED)
            trained = [t for t, m in zip(tokens, masks, strict=True) if m != MASKED]
            # by provenance (its prompt and its ids), not by content: a tiny model can sample the
            # same few tokens twice
            assert (tokens[:start], trained) not in private


@pytest.mark.reliability
async def test_keys_refuse_strangers_and_serve_only_keys_never_train(dev_server, tmp_path):
    config = proxy_config(dev_server, tmp_path, api_keys=["train-key"], serve_only_keys=["serve-key"])
    async with running_proxy(config) as (url, server):
        for key in ("", "wrong"):
            with pytest.raises(openai.AuthenticationError) as caught:
                await AsyncOpenAI(
                    base_url=url,
                    api_key=key or "unused",
                    default_headers=({"Authorization": ""} if not key else None),
                ).models.list()
            assert caught.value.status_code == 401
        for key, session in (("serve-key", "s"), ("train-key", "t")):
            client = AsyncOpenAI(base_url=url, api_key=key)
            messages = first_messages()
            message, _ = await ask(client, messages, session=session, max_tokens=16)
            await ask(client, messages + next_state(message), session=session, max_tokens=16)
        assert server.counts["unauthorized"] == 2 and server.counts["served_only"] == 2
    groups = read_groups(tmp_path / "groups.jsonl")
    assert [o["proxy"]["session"] for g in groups for o in g["overrides"]] == ["t"]


async def test_process_rewards_reach_each_sample_over_its_turn(dev_server, tmp_path):
    """Combined mode (PRM + OPD) through the proxy: each sample's `advantages` carry its turn's
    process reward over the turn's span (the rules PRM judge: a traceback in the next state is -1)."""
    opd = {
        "judge": {"backend": "rules"},
        "teacher": {"path": "completions"},
        "prm": {"enabled": True, "judge": {"backend": "rules"}},
    }
    async with running_proxy(proxy_config(dev_server, tmp_path, opd=opd)) as (url, _server):
        proxy = AsyncOpenAI(base_url=url, api_key="x")
        messages = first_messages()
        for turn in range(3):
            message, _ = await ask(proxy, messages, session="prm", seed=turn, max_tokens=24)
            messages = messages + next_state(message)
    groups = read_groups(tmp_path / "groups.jsonl")
    found = 0
    for group in groups:
        assert validate_group(group) == []
        for seq, override in enumerate(group["overrides"]):
            ((start, end),) = override["turn_spans"]
            (turn,) = override["prm"]["turns"]
            assert (turn["status"], turn["score"]) == ("scored", -1)
            advantages = group["advantages"][seq]
            assert advantages[start:end] == [-1.0] * (end - start) and set(advantages[:start]) <= {0.0}
            found += 1
    assert found == 2


@pytest.mark.reliability
async def test_bad_requests_get_openai_errors_and_session_limits_hold(dev_server, tmp_path):
    import aiohttp

    config = proxy_config(dev_server, tmp_path, max_trained_turns_per_session=1, max_request_bytes=4096)
    async with running_proxy(config) as (url, server):
        proxy = AsyncOpenAI(base_url=url, api_key="x", max_retries=0)
        with pytest.raises(openai.BadRequestError) as caught:
            await proxy.chat.completions.create(model="dev-model", messages=[], max_tokens=4)
        assert caught.value.body == {
            "message": "'messages' must be a non-empty list",
            "type": "invalid_request_error",
            "param": "messages",
            "code": None,
        }
        with pytest.raises(openai.NotFoundError):
            await proxy.chat.completions.create(model="gpt-4o", messages=first_messages(), max_tokens=4)
        async with aiohttp.ClientSession() as http:
            async with http.post(f"{url}/chat/completions", data=b"{not json") as response:
                assert (response.status, (await response.json())["error"]["message"]) == (
                    400,
                    "the request body is not valid JSON",
                )
            big = {"model": "dev-model", "messages": [{"role": "user", "content": "x" * 5000}]}
            async with http.post(f"{url}/chat/completions", json=big) as response:
                assert response.status == 413
        messages = first_messages()
        for turn in range(3):  # only the first turn may train
            message, _ = await ask(proxy, messages, session="limited", seed=turn, max_tokens=8)
            messages = messages + next_state(message)
        assert server.feed.stats.submitted == 1 and server.counts["turns_over_session_limits"] == 2
