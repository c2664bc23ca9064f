"""The Responses and Anthropic Messages wires through a real `hermes-opd proxy` in front of the
real dev vLLM, driven by the official `openai` SDK (`client.responses.create`, whole and streamed)
and the official `anthropic` SDK (`messages.create` and `messages.stream`): a tool round trip
(call, tool result, next answer) continues the session without a fork, under the session header
each real client sends (Codex CLI `session-id`, Claude Code `X-Claude-Code-Session-Id`), every
trained sample holds exactly the ids and logprobs vLLM sampled, and its teacher rows are exact
against transformers on the teacher's input."""

from __future__ import annotations

import anthropic
import pytest
from anthropic import AsyncAnthropic
from openai import AsyncOpenAI

from hermes_opd.contract.constants import MASKED
from hermes_opd.contract.validation import validate_group
from tests.support.proxy_factory import (
    SYSTEM,
    TOOLS,
    TRACEBACK,
    USER,
    capture_generations,
    check_teacher_rows,
    proxy_config,
    read_groups,
    running_proxy,
)

pytestmark = pytest.mark.integration

RESPONSES_TOOLS = [{"type": "function", **t["function"]} for t in TOOLS]
"""The same tools in the Responses' flat form."""
ANTHROPIC_TOOLS = [
    {
        "name": t["function"]["name"],
        "description": t["function"]["description"],
        "input_schema": t["function"]["parameters"],
    }
    for t in TOOLS
]


def check_samples(groups, session: str, generations, turns: int, reference_model) -> int:
    """The session's samples: one per finished turn, each exactly a prompt and answer vLLM saw, and
    their teacher rows exact against transformers. Returns the teacher rows checked."""
    samples = [
        (g, s)
        for g in groups
        for s in range(len(g["tokens"]))
        if g["overrides"][s]["proxy"]["session"] == session
    ]
    assert sorted(g["overrides"][s]["proxy"]["turn"] for g, s in samples) == list(range(turns))
    sampled = {(tuple(p), tuple(i)): lps for p, i, lps in generations}
    for group, seq in samples:
        assert validate_group(group) == []
        tokens, masks = group["tokens"][seq], group["masks"][seq]
        ((start, end),) = group["overrides"][seq]["turn_spans"]
        key = (tuple(tokens[:start]), tuple(tokens[start:end]))
        assert key in sampled, "a trained turn that vLLM did not sample"
        assert group["inference_logprobs"][seq][start:end] == sampled[key]
        assert [i for i, m in enumerate(masks) if m != MASKED] == list(range(start, end))
    return sum(check_teacher_rows(group, seq, reference_model) for group, seq in samples)


def no_forks(counts) -> None:
    assert not {k: v for k, v in counts.items() if k.startswith("forks_") or k.startswith("turns_dropped")}


NOT_TRAINED = {"X-Hermes-Train": "false"}
"""A probe's header: answered in a private session, never recorded, joining no other session."""


async def seed_for(ask, good) -> int:
    """The first seed whose answer is `good` (asked without training, so the probes leave no trace):
    the tiny dev model, forced to call a tool, does not always close the call within the budget."""
    for seed in range(24):
        if good(await ask(seed)):
            return seed
    pytest.fail("the dev model gave no complete tool call in 24 seeds")


async def test_responses_tool_round_trip_whole_and_streamed(dev_server, tmp_path, reference_model):
    async with running_proxy(proxy_config(dev_server, tmp_path)) as (url, server):
        client = AsyncOpenAI(base_url=url, api_key="x")
        common = {
            "model": "dev-model",
            "instructions": SYSTEM,
            "tools": RESPONSES_TOOLS,
            "max_output_tokens": 160,
            "temperature": 1.0,
            "store": False,
        }
        history: list = [
            {"role": "developer", "content": [{"type": "input_text", "text": "Be brief."}]},
            {"role": "user", "content": [{"type": "input_text", "text": USER}]},
        ]

        def ask(seed, headers):
            return client.responses.create(
                input=history,
                tool_choice="required",
                extra_body={"seed": seed},
                **{**common, "extra_headers": headers},
            )

        seed = await seed_for(lambda s: ask(s, NOT_TRAINED), lambda r: r.status == "completed")
        generations = capture_generations(server)
        common["extra_headers"] = {"session-id": "codex-1"}
        first = await ask(seed, common["extra_headers"])
        calls = [o for o in first.output if o.type == "function_call"]
        assert first.status == "completed" and calls and first.usage.output_tokens == len(generations[0][1])
        assert first.usage.input_tokens == len(generations[0][0])
        assert {c.name for c in calls} <= {"run_python", "write_file"}
        history += [o.model_dump(exclude_none=True) for o in first.output]
        history += [
            {"type": "function_call_output", "call_id": c.call_id, "output": TRACEBACK} for c in calls
        ]

        deltas, final = [], None
        stream = await client.responses.create(input=history, stream=True, extra_body={"seed": 2}, **common)
        async for event in stream:
            if event.type == "response.output_text.delta":
                deltas.append(event.delta)
            elif event.type in ("response.completed", "response.incomplete"):
                final = event.response
        assert final is not None and "".join(deltas) == final.output_text
        assert final.usage.output_tokens == len(generations[1][1])
        history += [o.model_dump(exclude_none=True) for o in final.output]
        history += [
            {"type": "function_call_output", "call_id": o.call_id, "output": TRACEBACK}
            for o in final.output
            if o.type == "function_call"
        ] or [{"role": "user", "content": "No. " + TRACEBACK}]
        await client.responses.create(input=history, extra_body={"seed": 3}, **common)  # turn 2's next state
        counts = dict(server.counts)
    no_forks(counts)
    assert counts["turns_finished"] == 2
    rows = check_samples(read_groups(tmp_path / "groups.jsonl"), "codex-1", generations, 2, reference_model)
    assert rows > 0, "the rules judge hints on the tracebacks: some turn must be scored"


async def test_messages_tool_round_trip_create_and_stream(dev_server, tmp_path, reference_model):
    async with running_proxy(proxy_config(dev_server, tmp_path)) as (url, server):
        client = AsyncAnthropic(base_url=url.removesuffix("/v1"), api_key="x")
        common = {
            "model": "dev-model",
            "system": [{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}],
            "tools": ANTHROPIC_TOOLS,
            "max_tokens": 160,
            "metadata": {"user_id": "u"},
        }
        # the SDK no longer takes `temperature` as an argument: it travels in the body, as clients send it
        history: list = [{"role": "user", "content": [{"type": "text", "text": USER}]}]

        def ask(seed, headers):
            return client.messages.create(
                messages=history,
                tool_choice={"type": "any"},
                extra_body={"seed": seed, "temperature": 1.0},
                **{**common, "extra_headers": headers},
            )

        seed = await seed_for(lambda s: ask(s, NOT_TRAINED), lambda m: m.stop_reason == "tool_use")
        generations = capture_generations(server)
        common["extra_headers"] = {
            "X-Claude-Code-Session-Id": "claude-1",
            "anthropic-beta": "made-up-2099-01-01",
        }
        first = await ask(seed, common["extra_headers"])
        uses = [b for b in first.content if b.type == "tool_use"]
        assert (
            first.stop_reason == "tool_use" and uses and first.usage.output_tokens == len(generations[0][1])
        )
        assert first.usage.input_tokens == len(generations[0][0])
        history += [
            {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": b.id, "content": TRACEBACK} for b in uses],
            },
        ]

        async with client.messages.stream(
            messages=history, extra_body={"seed": 2, "temperature": 1.0}, **common
        ) as stream:
            text = "".join([piece async for piece in stream.text_stream])
            second = await stream.get_final_message()
        assert text == "".join(b.text for b in second.content if b.type == "text")
        assert second.usage.output_tokens == len(generations[1][1])
        assert second.usage.input_tokens == len(generations[1][0])
        uses = [b for b in second.content if b.type == "tool_use"]
        history.append(
            {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in second.content]}
        )
        history.append(
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": b.id, "content": TRACEBACK} for b in uses]
                or "No. " + TRACEBACK,
            }
        )
        await client.messages.create(
            messages=history, extra_body={"seed": 3}, **common
        )  # turn 2's next state

        with pytest.raises(anthropic.NotFoundError) as caught:
            await client.messages.create(messages=history, **{**common, "model": "claude-nonexistent"})
        assert caught.value.body["error"]["type"] == "not_found_error"
        counts = dict(server.counts)
    no_forks(counts)
    assert counts["turns_finished"] == 2
    rows = check_samples(read_groups(tmp_path / "groups.jsonl"), "claude-1", generations, 2, reference_model)
    assert rows > 0, "the rules judge hints on the tracebacks: some turn must be scored"
