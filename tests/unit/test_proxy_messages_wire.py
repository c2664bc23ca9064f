"""The Anthropic Messages wire (environments/proxy/messages/): every request field into the one
conversation shape or one 400 naming the field; the answer as Anthropic's objects and stream
events, each checked against the `anthropic` SDK's own types (the final blocks are the streamed
deltas put together); an answer re-sent as history gives back the assistant message the session
recorded (no fork); and the HTTP route over a fake TurnService."""

from __future__ import annotations

import json
from typing import Any

import pytest
from anthropic.types import Message, RawMessageStreamEvent
from pydantic import TypeAdapter

from environments.proxy.conversation import (
    AnswerStarted,
    AssistantTurn,
    ContentDelta,
    Conversation,
    NamedTool,
    OutputFormat,
    ReasoningDelta,
    ToolCall,
    TurnDone,
    WireError,
)
from environments.proxy.messages.answer import MessageStream
from environments.proxy.messages.errors import error_body
from environments.proxy.messages.request import parse_request
from environments.proxy.messages.routes import add_routes
from tests.support.fake_turn_service import FakeService, client_for, sse_events

EVENT = TypeAdapter(RawMessageStreamEvent)
TOOL = {
    "name": "run",
    "description": "Run it.",
    "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}},
    "cache_control": {"type": "ephemeral"},
}
BASE: dict[str, Any] = {
    "model": "dev-model",
    "max_tokens": 64,
    "messages": [{"role": "user", "content": "hi"}],
}


def conversation(**body: Any) -> Conversation:
    return parse_request({**BASE, **body})[1]


def refused(body: Any) -> WireError:
    with pytest.raises(WireError) as caught:
        parse_request(body)
    assert caught.value.status == 400 and caught.value.kind == "invalid_request"
    return caught.value


# -- requests ------------------------------------------------------------------------------------
def test_every_field_of_a_request():
    got = conversation(
        system=[
            {"type": "text", "text": "You are an agent.", "cache_control": {"type": "ephemeral"}},
            {"type": "text", "text": "Use tools."},
        ],
        messages=[
            {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}
        ],
        tools=[TOOL],
        tool_choice={"type": "tool", "name": "run", "disable_parallel_tool_use": True},
        max_tokens=9,
        stop_sequences=["END"],
        temperature=0.5,
        top_p=0.9,
        top_k=5,
        seed=4,
        stream=True,
        metadata={"user_id": "u"},
        thinking={"type": "enabled", "budget_tokens": 2048},
        output_config={"effort": "low", "format": {"type": "json_schema", "schema": {"type": "object"}}},
        context_management={"edits": [{"type": "clear_tool_uses_20250919"}]},
        service_tier="auto",
    )
    assert got == Conversation(
        model="dev-model",
        messages=[
            {"role": "system", "content": "You are an agent.\n\nUse tools."},
            {"role": "user", "content": "a\n\nb"},
        ],
        tools=[
            {
                "type": "function",
                "function": {"name": "run", "description": "Run it.", "parameters": TOOL["input_schema"]},
            }
        ],
        tool_choice=NamedTool("run"),
        output_format=OutputFormat("json_schema", {"type": "object"}),
        max_tokens=9,
        temperature=0.5,
        top_p=0.9,
        seed=4,
        stop=["END"],
        stream=True,
    )


def test_defaults_and_tool_choices():
    got = conversation()
    assert got.messages == [{"role": "user", "content": "hi"}]
    assert (got.tools, got.tool_choice, got.output_format, got.max_tokens, got.stop) == (
        None,
        "auto",
        None,
        64,
        [],
    )
    assert (got.temperature, got.top_p, got.stream) == (1.0, 1.0, False)
    assert conversation(system="S").messages[0] == {"role": "system", "content": "S"}
    assert conversation(tools=[TOOL], tool_choice={"type": "any"}).tool_choice == "required"
    assert conversation(tools=[TOOL], tool_choice={"type": "auto"}).tool_choice == "auto"
    assert conversation(tools=[TOOL], tool_choice={"type": "none"}).tool_choice == "none"
    assert conversation(tools=[{**TOOL, "type": "custom"}]).tool_names == {"run"}


def test_blocks_into_messages():
    got = conversation(
        messages=[
            {"role": "user", "content": "go"},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "Plan.", "signature": "sig"},
                    {"type": "redacted_thinking", "data": "xxx"},
                    {"type": "text", "text": "Running it."},
                    {"type": "tool_use", "id": "toolu_1", "name": "run", "input": {"path": "a"}},
                    {"type": "tool_use", "id": "toolu_2", "name": "run", "input": {}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_1",
                        "content": "out1",
                        "cache_control": {"type": "ephemeral"},
                    },
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_2",
                        "is_error": True,
                        "content": [{"type": "text", "text": "bad"}, {"type": "text", "text": "worse"}],
                    },
                    {"type": "tool_result", "tool_use_id": "toolu_9"},
                    {"type": "text", "text": "and now?"},
                ],
            },
            {"role": "assistant", "content": "plain"},
            {"role": "user", "content": []},
        ]
    )
    calls = [
        {"id": "toolu_1", "type": "function", "function": {"name": "run", "arguments": '{"path": "a"}'}},
        {"id": "toolu_2", "type": "function", "function": {"name": "run", "arguments": "{}"}},
    ]
    assert got.messages == [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": "Running it.", "reasoning_content": "Plan.", "tool_calls": calls},
        {"role": "tool", "content": "out1", "tool_call_id": "toolu_1", "name": "run"},
        {"role": "tool", "content": "Error: bad\n\nworse", "tool_call_id": "toolu_2", "name": "run"},
        {"role": "tool", "content": "", "tool_call_id": "toolu_9"},
        {"role": "user", "content": "and now?"},
        {"role": "assistant", "content": "plain"},
        {"role": "user", "content": ""},
    ]


USER = [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ([], None),
        ({"max_tokens": 5, "messages": USER}, "model"),
        ({"model": "m", "messages": USER}, "max_tokens"),
        ({**BASE, "max_tokens": 0}, "max_tokens"),
        ({**BASE, "max_tokens": "5"}, "max_tokens"),
        ({**BASE, "max_tokens": 5.0}, "max_tokens"),
        ({**BASE, "messages": []}, "messages"),
        ({**BASE, "messages": "hi"}, "messages"),
        ({**BASE, "messages": [5]}, "messages[0]"),
        ({**BASE, "messages": [{"role": "system", "content": "x"}]}, "messages"),
        ({**BASE, "messages": [{"role": "tool", "content": "x"}]}, "messages[0].role"),
        ({**BASE, "messages": [{"role": "user"}]}, "messages[0].content"),
        (
            {**BASE, "messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]},
            "messages[0].content[0]",
        ),
        (
            {**BASE, "messages": [{"role": "user", "content": [{"type": "text"}]}]},
            "messages[0].content[0].text",
        ),
        (
            {**BASE, "messages": [{"role": "user", "content": [{"type": "tool_result"}]}]},
            "messages[0].content[0].tool_use_id",
        ),
        (
            {
                **BASE,
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {
                                "type": "tool_result",
                                "tool_use_id": "t",
                                "content": [{"type": "image", "source": {}}],
                            }
                        ],
                    }
                ],
            },
            "messages[0].content[0].content[0]",
        ),
        (
            {
                **BASE,
                "messages": [
                    {
                        "role": "user",
                        "content": [{"type": "tool_result", "tool_use_id": "t", "is_error": "y"}],
                    }
                ],
            },
            "messages[0].content[0].is_error",
        ),
        (
            {
                **BASE,
                "messages": [
                    {"role": "user", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}}]}
                ],
            },
            "messages[0].content",
        ),
        (
            {
                **BASE,
                "messages": [
                    *USER,
                    {"role": "assistant", "content": [{"type": "tool_result", "tool_use_id": "t"}]},
                    *USER,
                ],
            },
            "messages[1].content",
        ),
        (
            {
                **BASE,
                "messages": [
                    *USER,
                    {
                        "role": "assistant",
                        "content": [{"type": "tool_use", "id": "t", "name": "f", "input": "x"}],
                    },
                    *USER,
                ],
            },
            "messages[1].content[0].input",
        ),
        ({**BASE, "messages": [*USER, {"role": "assistant", "content": "prefill"}]}, "messages"),
        ({**BASE, "system": 5}, "system"),
        ({**BASE, "system": [{"type": "image"}]}, "system[0]"),
        ({**BASE, "tools": [{"name": "f"}]}, "tools[0].input_schema"),
        ({**BASE, "tools": [{"name": "", "input_schema": {}}]}, "tools[0].name"),
        ({**BASE, "tools": [{"type": "bash_20250124", "name": "bash"}]}, "tools[0].type"),
        ({**BASE, "tools": [TOOL, TOOL]}, "tools[1].name"),
        ({**BASE, "tool_choice": "auto"}, "tool_choice"),
        ({**BASE, "tool_choice": {"type": "any"}}, "tool_choice"),
        ({**BASE, "tools": [TOOL], "tool_choice": {"type": "tool"}}, "tool_choice.name"),
        ({**BASE, "tools": [TOOL], "tool_choice": {"type": "tool", "name": "other"}}, "tool_choice.name"),
        ({**BASE, "tools": [TOOL], "tool_choice": {"type": "sometimes"}}, "tool_choice"),
        ({**BASE, "stop_sequences": "END"}, "stop_sequences"),
        ({**BASE, "stop_sequences": ["x"] * 17}, "stop_sequences"),
        ({**BASE, "temperature": 1.5}, "temperature"),
        ({**BASE, "top_p": "1"}, "top_p"),
        ({**BASE, "stream": 1}, "stream"),
        ({**BASE, "seed": -1}, "seed"),
        ({**BASE, "output_config": {"format": {"type": "json_schema"}}}, "output_config.format.schema"),
    ],
)
def test_each_wrong_field_is_one_400_naming_it(body, param):
    error = refused(body)
    assert error.param == param, error.message
    assert error.message and "Traceback" not in error.message


# -- answers -------------------------------------------------------------------------------------
def turn(content="Hello there", reasoning=None, calls=(), finish="stop", stop_sequence=None) -> AssistantTurn:
    return AssistantTurn(
        content=content,
        reasoning=reasoning,
        tool_calls=list(calls),
        finish_reason=finish,
        prompt_tokens=11,
        completion_tokens=5,
        stop_sequence=stop_sequence,
    )


def run_stream(events: list) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    stream = MessageStream("dev-model")
    out = stream.start()
    for event in events:
        out += stream.on(event)
    for event in out:
        EVENT.validate_python(event)  # each event is one of the SDK's stream event types
    Message.model_validate(stream.final)
    # the deltas put together are the final blocks
    for index, block in enumerate(stream.final["content"]):
        deltas = [e["delta"] for e in out if e["type"] == "content_block_delta" and e["index"] == index]
        if block["type"] == "tool_use":
            assert json.loads("".join(d["partial_json"] for d in deltas)) == block["input"]
        else:
            assert "".join(d[block["type"]] for d in deltas) == block[block["type"]]
    return out, stream.final


def test_a_streamed_answer_with_thinking_text_and_calls():
    calls = [ToolCall("toolu_1", "run", '{"path": "a.py"}'), ToolCall("toolu_2", "run", "{}")]
    events, final = run_stream(
        [
            ReasoningDelta("I should "),
            ReasoningDelta("run it."),
            ContentDelta("Running"),
            ContentDelta(" it."),
            TurnDone(turn("Running it.", "I should run it.", calls, "tool_calls")),
        ]
    )
    kinds = [e["type"] for e in events]
    assert kinds[0] == "message_start" and kinds[-2:] == ["message_delta", "message_stop"]
    message = Message.model_validate(final)
    assert message.stop_reason == "tool_use"
    assert [b.type for b in message.content] == ["thinking", "text", "tool_use", "tool_use"]
    assert message.content[0].thinking == "I should run it." and message.content[1].text == "Running it."
    assert [(b.id, b.name, b.input) for b in message.content[2:]] == [
        ("toolu_1", "run", {"path": "a.py"}),
        ("toolu_2", "run", {}),
    ]
    assert (message.usage.input_tokens, message.usage.output_tokens) == (11, 5)
    assert [e["index"] for e in events if e["type"] == "content_block_start"] == [0, 1, 2, 3]


def test_stop_reasons_and_the_last_word():
    assert run_stream([TurnDone(turn("abc", finish="length"))])[1]["stop_reason"] == "max_tokens"
    assert run_stream([TurnDone(turn("abc"))])[1]["stop_reason"] == "end_turn"
    _, final = run_stream([ContentDelta("Hi"), TurnDone(turn("Hi <tool_call>{bad"))])
    assert final["content"] == [{"type": "text", "text": "Hi <tool_call>{bad"}]
    _, final = run_stream([TurnDone(turn(""))])
    assert final["content"] == [{"type": "text", "text": ""}]
    _, final = run_stream([TurnDone(turn("", "late thought", [ToolCall("t", "run", "{}")], "tool_calls"))])
    assert [b["type"] for b in final["content"]] == ["thinking", "tool_use"]
    _, final = run_stream(
        [TurnDone(turn("", None, [ToolCall("t", "run", "not json"), ToolCall("u", "run", "[1]")]))]
    )
    assert [b["input"] for b in final["content"]] == [{"arguments": "not json"}, {"arguments": [1]}]


def test_errors_are_anthropics_shape():
    assert error_body(WireError("bad")) == {
        "type": "error",
        "error": {"type": "invalid_request_error", "message": "bad"},
    }
    assert error_body(WireError("busy", "overloaded"))["error"]["type"] == "overloaded_error"
    assert error_body(WireError("gone", "upstream"))["error"]["type"] == "api_error"
    stream = MessageStream("m")
    assert stream.fail(WireError("x", "upstream")) == [error_body(WireError("x", "upstream"))]


def test_an_answer_sent_back_is_the_message_the_session_recorded():
    done = turn("Running it.", "Plan.", [ToolCall("toolu_1", "run", '{"path": "a.py"}')], "tool_calls")
    _, final = run_stream([ContentDelta("Running"), TurnDone(done)])
    # as the anthropic SDK re-sends it: the message's content blocks, dumped
    blocks = [b.model_dump(exclude_none=True) for b in Message.model_validate(final).content]
    history = [
        *USER,
        {"role": "assistant", "content": blocks},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "ok"}]},
    ]
    got = conversation(messages=history, tools=[TOOL])
    assert got.messages[1] == {
        "role": "assistant",
        "content": "Running it.",
        "reasoning_content": "Plan.",
        "tool_calls": [
            {
                "id": "toolu_1",
                "type": "function",
                "function": {"name": "run", "arguments": '{"path": "a.py"}'},
            }
        ],
    }
    assert got.messages[2] == {"role": "tool", "content": "ok", "tool_call_id": "toolu_1", "name": "run"}


# -- the route -----------------------------------------------------------------------------------
async def test_the_route_answers_whole_and_streamed():
    service = FakeService([ContentDelta("Hel"), ContentDelta("lo"), TurnDone(turn("Hello"))])
    client = await client_for(add_routes, service)
    try:
        whole = await client.post(
            "/v1/messages?beta=true", json=BASE, headers={"anthropic-beta": "made-up-2099"}
        )
        assert whole.status == 200
        assert Message.model_validate(await whole.json()).content[0].text == "Hello"
        streamed = await client.post("/v1/messages", json={**BASE, "stream": True})
        assert streamed.status == 200 and streamed.headers["Content-Type"].startswith("text/event-stream")
        assert [e["type"] for e in sse_events(await streamed.text())][-1] == "message_stop"
        assert service.closed and len(service.seen) == 2
    finally:
        await client.close()


async def test_a_stream_says_its_input_tokens_first_and_which_stop_sequence_ended_it():
    events = [AnswerStarted(11), ContentDelta("Hel"), TurnDone(turn("Hel", stop_sequence="lo"))]
    client = await client_for(add_routes, FakeService(events))
    try:
        streamed = await client.post("/v1/messages", json={**BASE, "stream": True, "stop_sequences": ["lo"]})
        sent = sse_events(await streamed.text())
        for event in sent:
            EVENT.validate_python(event)
        assert sent[0]["type"] == "message_start" and sent[0]["message"]["usage"]["input_tokens"] == 11
        delta = next(e for e in sent if e["type"] == "message_delta")
        assert delta["delta"] == {"stop_reason": "stop_sequence", "stop_sequence": "lo"}
        whole = await client.post("/v1/messages", json={**BASE, "stop_sequences": ["lo"]})
        message = Message.model_validate(await whole.json())
        assert (message.stop_reason, message.stop_sequence) == ("stop_sequence", "lo")
    finally:
        await client.close()


async def test_the_route_refuses_in_anthropics_shape_before_and_during_a_stream():
    client = await client_for(add_routes, FakeService([], refuse=WireError("no such model", "not_found")))
    try:
        refused_ = await client.post("/v1/messages", json={**BASE, "stream": True})
        assert refused_.status == 404
        assert await refused_.json() == {
            "type": "error",
            "error": {"type": "not_found_error", "message": "no such model"},
        }
        bad = await client.post("/v1/messages", json={"model": "m"})
        assert bad.status == 400 and (await bad.json())["error"]["type"] == "invalid_request_error"
    finally:
        await client.close()
    client = await client_for(add_routes, FakeService([ContentDelta("x"), TurnDone(turn("x"))], fail_after=1))
    try:
        streamed = await client.post("/v1/messages", json={**BASE, "stream": True})
        assert streamed.status == 200
        assert sse_events(await streamed.text())[-1] == {
            "type": "error",
            "error": {"type": "api_error", "message": "the policy server failed"},
        }
    finally:
        await client.close()


def test_a_system_message_inside_messages_stays_at_its_place():
    """Claude Code sends `{"role": "system"}` after the first user message (captured 2.1.197)."""
    body = {
        **BASE,
        "messages": [
            {"role": "user", "content": "hi"},
            {"role": "system", "content": [{"type": "text", "text": "agents: ..."}]},
        ],
    }
    _, conv = parse_request(body)
    assert conv.messages[-2:] == [
        {"role": "user", "content": "hi"},
        {"role": "system", "content": "agents: ..."},
    ]


async def test_count_tokens_is_the_prompt_the_model_would_be_sent(dev_tokenizer, dev_model_dir):
    """`POST /v1/messages/count_tokens` on a real (serve-only) proxy: the count is the length of
    the model's own chat template over the same messages and tools, and no session is held."""
    from aiohttp.test_utils import TestClient, TestServer

    from environments.proxy.build import build_proxy
    from environments.proxy.proxy_config import ProxyConfig

    config = ProxyConfig.model_validate(
        {
            "policy_base_url": "http://127.0.0.1:9/v1",  # never called: counting needs no vLLM
            "policy_model": "dev-model",
            "tokenizer": str(dev_model_dir),
            "train": False,
        }
    )
    server = await build_proxy(config, dev_tokenizer)
    client = TestClient(TestServer(server.app))
    await client.start_server()
    tool = {"name": "run", "description": "Run a file.", "input_schema": {"type": "object"}}
    body = {
        "model": "dev-model",
        "system": "Be brief.",
        "tools": [tool],
        "messages": [{"role": "user", "content": "Run a.py"}],
    }
    try:
        counted = await client.post("/v1/messages/count_tokens", json=body)
        assert counted.status == 200
        expected = dev_tokenizer.apply_chat_template(
            [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Run a.py"}],
            tools=[
                {
                    "type": "function",
                    "function": {
                        "name": "run",
                        "description": "Run a file.",
                        "parameters": {"type": "object"},
                    },
                }
            ],
            add_generation_prompt=True,
            tokenize=True,
            return_dict=True,
        )["input_ids"]
        assert await counted.json() == {"input_tokens": len(expected)}
        assert len(server.sessions) == 0
        wrong = await client.post("/v1/messages/count_tokens", json={**body, "model": "other"})
        assert wrong.status == 404 and (await wrong.json())["error"]["type"] == "not_found_error"
        bad = await client.post("/v1/messages/count_tokens", json={"model": "dev-model"})
        assert bad.status == 400 and (await bad.json())["error"]["type"] == "invalid_request_error"
    finally:
        await client.close()
        await server.stop_background()
