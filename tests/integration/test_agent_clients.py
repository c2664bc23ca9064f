"""Stock agent clients, unchanged but for their base URL, through a real `hermes-opd proxy` in front
of the agent dev model on a real CPU vLLM with a 64k context (tests/support/agent_model.py: it
answers a conversation's first request with a call of one of the offered tools, and a tool result
with a short answer). One vLLM serves every test here. Each test is one short conversation and
checks what a user of that client needs:

- the client executed the tool call it got, and its next request carried the result (as the proxy
  parsed it, whichever wire carried it);
- the next answer came back to the client;
- the finished turn was written as a sample, `hermes-opd validate` is clean on the groups file, the
  default (`llm`) judge gave a hint and the teacher scored positions;
- no sample holds a token the policy did not sample (tests/support/agent_clients.py).

Python clients: the OpenAI Agents SDK with its default model (Responses), the Anthropic SDK with
`messages.stream`, smolagents' `ToolCallingAgent` (tool calls re-rendered as text, results as
`Observation:` user messages, `tool_choice: "required"`), and LangChain's `with_structured_output`
(a named `tool_choice`, and a `response_format` JSON schema). The CLIs from npm (installed into the
test cache on first use): Codex CLI `codex exec` (Responses, 10k-token prompt) and Claude Code
`claude -p` (Anthropic Messages, 28k-token prompt), each running its shell tool's `echo hi`."""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from typing import Literal

import pytest
from pydantic import BaseModel, Field

from tests.support.agent_clients import (
    ANSWER,
    capture_exchanges,
    check_trained,
    config,
    install_agent_clients,
    no_forks,
    run_claude,
    run_codex,
    tool_results_after,
    written,
)
from tests.support.proxy_factory import capture_generations, running_proxy

pytestmark = pytest.mark.integration


WEATHER = "Sunny, 21 C, light wind from the west."
"""What the client's tool returns: the text the next request must carry."""


async def test_openai_agents_sdk_default_model_runs_a_function_tool(agent_server, tmp_path):
    """`Runner.run` with the SDK's default model class (`OpenAIResponsesModel`, `POST /v1/responses`),
    no session header: the proxy finds the session from the history the SDK re-sends."""
    from agents import Agent, RunConfig, Runner, function_tool
    from agents.models.openai_provider import OpenAIProvider
    from agents.models.openai_responses import OpenAIResponsesModel
    from openai import AsyncOpenAI

    ran: list[str] = []

    @function_tool
    def get_weather(city: str) -> str:
        """The weather in a city now."""
        ran.append(city)
        return WEATHER

    started = time.monotonic()
    async with running_proxy(config(agent_server, tmp_path)) as (url, server):
        exchanges, generations = capture_exchanges(server), capture_generations(server)
        provider = OpenAIProvider(openai_client=AsyncOpenAI(base_url=url, api_key="x", max_retries=0))
        assert isinstance(provider.get_model(agent_server.model_name), OpenAIResponsesModel)
        agent = Agent(
            name="weather",
            instructions="Answer with the tools.",
            tools=[get_weather],
            model=agent_server.model_name,
        )
        result = await Runner.run(
            agent,
            "What is the weather in Paris?",
            run_config=RunConfig(model_provider=provider, tracing_disabled=True),
        )
        assert ran == ["hi"], [e.turn for e in exchanges]  # the call the model made, run by the SDK
        assert result.final_output == ANSWER
        assert len(exchanges) == 2 and [c.name for c in exchanges[0].turn.tool_calls] == ["get_weather"]
        assert list(tool_results_after(exchanges, 0).values()) == [WEATHER]
        await written(tmp_path)
        counts = server.counts
    no_forks(counts)
    check_trained(tmp_path, generations)
    print(f"\nopenai-agents: {time.monotonic() - started:.1f} s")


async def test_anthropic_sdk_streams_a_tool_round_trip(agent_server, tmp_path):
    """`messages.stream` with tools: the streamed `tool_use` is run, its `tool_result` sent back in a
    second streamed request, whose text arrives as deltas."""
    from anthropic import AsyncAnthropic

    tools = [
        {
            "name": "get_weather",
            "description": "The weather in a city now.",
            "input_schema": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        }
    ]
    started = time.monotonic()
    async with running_proxy(config(agent_server, tmp_path)) as (url, server):
        exchanges, generations = capture_exchanges(server), capture_generations(server)
        client = AsyncAnthropic(base_url=url.removesuffix("/v1"), api_key="x", max_retries=0)
        messages: list = [{"role": "user", "content": "What is the weather in Paris?"}]
        common = {
            "model": agent_server.model_name,
            "max_tokens": 256,
            "tools": tools,
            "system": "Answer with the tools.",
        }
        async with client.messages.stream(messages=messages, **common) as stream:
            first = await stream.get_final_message()
        uses = [b for b in first.content if b.type == "tool_use"]
        assert first.stop_reason == "tool_use" and [(u.name, u.input) for u in uses] == [
            ("get_weather", {"city": "hi"})
        ]
        results = [{"type": "tool_result", "tool_use_id": u.id, "content": WEATHER} for u in uses]
        messages += [
            {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
            {"role": "user", "content": results},
        ]
        async with client.messages.stream(messages=messages, **common) as stream:
            deltas = [text async for text in stream.text_stream]
            second = await stream.get_final_message()
        assert "".join(deltas) == ANSWER and second.stop_reason == "end_turn"
        assert tool_results_after(exchanges, 0) == {uses[0].id: WEATHER}
        await written(tmp_path)
        counts = server.counts
    no_forks(counts)
    check_trained(tmp_path, generations)
    print(f"\nanthropic: {time.monotonic() - started:.1f} s")


async def test_smolagents_tool_calling_agent_turns_become_samples(agent_server, tmp_path):
    """smolagents' `ToolCallingAgent` with its defaults (Chat Completions, `tool_choice: "required"`,
    its tool calls re-sent as text and results as `Observation:` user messages). The share of its
    tool-call turns that became samples is printed; every turn that got a next state must be one, and
    no sample may hold a token the policy did not sample (a re-rendered turn is never trained as text)."""
    from smolagents import OpenAIServerModel, ToolCallingAgent, tool

    ran: list[str] = []

    @tool
    def get_weather(city: str) -> str:
        """The weather in a city now.

        Args:
            city: the city's name.
        """
        ran.append(city)
        return WEATHER

    started = time.monotonic()
    async with running_proxy(config(agent_server, tmp_path)) as (url, server):
        exchanges, generations = capture_exchanges(server), capture_generations(server)
        model = OpenAIServerModel(
            agent_server.model_name, api_base=url, api_key="x", client_kwargs={"max_retries": 0}
        )
        agent = ToolCallingAgent(tools=[get_weather], model=model, max_steps=3, verbosity_level=0)
        answer = await asyncio.to_thread(agent.run, "What is the weather in Paris?")
        assert ran == ["hi"] and answer == "hi"  # get_weather, then final_answer(answer="hi")
        assert [e.conversation.tool_choice for e in exchanges] == ["required", "required"]
        assert [[c.name for c in e.turn.tool_calls] for e in exchanges] == [["get_weather"], ["final_answer"]]
        observation = exchanges[1].conversation.messages[-1]
        assert observation["role"] == "user" and WEATHER in observation["content"]
        groups = await written(tmp_path)
        counts = server.counts
    tool_turns = sum(1 for e in exchanges if e.turn.tool_calls)
    with_next_state = tool_turns - 1  # the final_answer turn ends the run: no request follows it
    trained = sum(len(g["tokens"]) for g in groups)
    print(
        f"\nsmolagents: {trained}/{tool_turns} tool-call turns became samples "
        f"({with_next_state} had a next state); {time.monotonic() - started:.1f} s"
    )
    # a re-rendered reply finishes its turn from the old record and starts a new one: the only fork
    assert counts["turns_finished_rerendered"] == counts["turns_finished"] == with_next_state
    no_forks(counts - Counter(forks_history_rerendered=with_next_state))
    assert trained == with_next_state
    check_trained(tmp_path, generations)


class Weather(BaseModel):
    """Fields whose JSON has a bounded length, so that a constrained answer always ends: the agent dev
    model has no plan for a `response_format` (a chat template never sees it), and would fill a
    free string under the grammar until `max_tokens`. The bounded integer is pydantic's `ge`/`le`,
    `minimum`/`maximum` in the schema, and the station a `pattern` (the grammar honours both)."""

    city: Literal["Paris", "Rome"]
    sunny: bool
    celsius: int = Field(ge=-40, le=50)
    station: str = Field(pattern=r"^[A-Z]{4}$")


@pytest.mark.parametrize("method", ["function_calling", "json_schema"])
async def test_langchain_structured_output_returns_a_valid_object(agent_server, tmp_path, method):
    """`ChatOpenAI(...).with_structured_output(Weather, method=...)`: `function_calling` sends a named
    `tool_choice`, `json_schema` a `response_format`; either way a valid `Weather` comes back."""
    from langchain_openai import ChatOpenAI

    started = time.monotonic()
    async with running_proxy(config(agent_server, tmp_path)) as (url, server):
        exchanges = capture_exchanges(server)
        llm = ChatOpenAI(
            model=agent_server.model_name, base_url=url, api_key="x", max_retries=0, max_tokens=128
        )
        result = await llm.with_structured_output(Weather, method=method).ainvoke("The weather in Paris?")
        assert isinstance(result, Weather)
        (exchange,) = exchanges
        if method == "function_calling":
            assert exchange.conversation.tool_choice.name == "Weather"
            assert (result.city, result.sunny) == ("Paris", False)  # the dev model's call for that schema
        else:
            assert exchange.conversation.output_format.kind == "json_schema"
            assert Weather.model_validate(json.loads(exchange.turn.content)) == result
    print(f"\nlangchain {method}: {time.monotonic() - started:.1f} s")


# -- the CLIs from npm ---------------------------------------------------------------------------------

TASK = "List the files in this folder."
LONG = {"max_sample_tokens": 65536}
"""These CLIs' first prompts are 10k (Codex) to 25k (Claude Code) tokens: the default
`max_sample_tokens` (65536) trains them; said here so a lower default cannot silently drop them."""


@pytest.fixture(scope="module")
def agent_cli_bin():
    return install_agent_clients()


def the_tool_turn(exchanges) -> int:
    """The index of the one answer that called a tool (a CLI may make side calls, e.g. a title)."""
    (index,) = [i for i, e in enumerate(exchanges) if e.turn is not None and e.turn.tool_calls]
    return index


def check_round_trip(exchanges, shell: str, arguments: dict, session_header: str) -> None:
    index = the_tool_turn(exchanges)
    call, follow = exchanges[index], exchanges[index + 1]
    assert [(c.name, json.loads(c.arguments)) for c in call.turn.tool_calls] == [(shell, arguments)]
    assert call.caller.session_id and follow.caller.session_id == call.caller.session_id, session_header
    results = tool_results_after(exchanges, index)
    assert list(results) == [call.turn.tool_calls[0].id]
    assert "hi" in next(iter(results.values())).split(), results  # the output of `echo hi`
    assert follow.turn is not None and follow.turn.content == ANSWER


async def test_codex_exec_runs_the_models_command(agent_cli_bin, agent_server, tmp_path):
    workdir = tmp_path / "work"
    workdir.mkdir()
    started = time.monotonic()
    async with running_proxy(config(agent_server, tmp_path, **LONG)) as (url, server):
        exchanges, generations = capture_exchanges(server), capture_generations(server)
        run = await run_codex(agent_cli_bin, url, agent_server.model_name, workdir, TASK)
        assert run.returncode == 0, (run.stdout[-2000:], run.stderr[-3000:])
        check_round_trip(exchanges, "exec_command", {"cmd": "echo hi"}, "session-id")
        assert ANSWER in run.stdout
        await written(tmp_path)
        counts = server.counts
    no_forks(counts)
    check_trained(tmp_path, generations)
    print(f"\ncodex exec: {len(exchanges)} requests, {time.monotonic() - started:.1f} s")


async def test_claude_code_print_runs_the_models_command(agent_cli_bin, agent_server, tmp_path):
    workdir = tmp_path / "work"
    workdir.mkdir()
    started = time.monotonic()
    async with running_proxy(config(agent_server, tmp_path, **LONG)) as (url, server):
        exchanges, generations = capture_exchanges(server), capture_generations(server)
        run = await run_claude(agent_cli_bin, url.removesuffix("/v1"), agent_server.model_name, workdir, TASK)
        assert run.returncode == 0, (run.stdout[-2000:], run.stderr[-3000:])
        check_round_trip(exchanges, "Bash", {"command": "echo hi"}, "X-Claude-Code-Session-Id")
        assert ANSWER in run.stdout
        # its title call: no tools, JSON asked for by `output_config.format`, the main session's
        # header; a branch of its own that forks nothing and finishes nothing of the main session
        main = exchanges[the_tool_turn(exchanges)].caller.session_id
        (title,) = [e for e in exchanges if not e.conversation.tools]
        assert title.caller.session_id == main and title.conversation.output_format is not None
        await written(tmp_path)
        counts = server.counts
    assert counts["branches_unrelated_history"] == 1 and counts["turns_finished"] == 1, dict(counts)
    no_forks(counts)
    check_trained(tmp_path, generations)
    print(f"\nclaude -p: {len(exchanges)} requests, {time.monotonic() - started:.1f} s")
