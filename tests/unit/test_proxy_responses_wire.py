"""The Responses wire (environments/proxy/responses/): every request field into the one
conversation shape or one 400 naming the field; the answer as OpenAI's objects and stream events,
each checked against the `openai` SDK's own types; an answer's output re-sent as input gives back
the assistant message the session recorded (no fork); and the HTTP route over a fake TurnService."""

from __future__ import annotations

from typing import Any

import pytest
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

from environments.proxy.conversation import (
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
from environments.proxy.responses.answer import ResponseStream
from environments.proxy.responses.errors import error_body
from environments.proxy.responses.request import parse_request
from environments.proxy.responses.routes import add_routes
from tests.support.fake_turn_service import FakeService, client_for, sse_events

EVENT = TypeAdapter(ResponseStreamEvent)
TOOL = {
    "type": "function",
    "name": "run",
    "description": "Run it.",
    "strict": False,
    "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
}
BASE: dict[str, Any] = {"model": "dev-model", "input": "hi"}


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
        instructions="Be brief.",
        input=[
            {
                "type": "message",
                "role": "developer",
                "content": [{"type": "input_text", "text": "Use tools."}],
            },
            {
                "role": "user",
                "content": [{"type": "input_text", "text": "a"}, {"type": "input_text", "text": "b"}],
            },
        ],
        tools=[TOOL],
        tool_choice={"type": "function", "name": "run"},
        text={"format": {"type": "json_schema", "name": "out", "schema": {"type": "object"}, "strict": True}},
        max_output_tokens=7,
        temperature=0.5,
        top_p=0.9,
        seed=3,
        stream=True,
        store=False,
        include=["reasoning.encrypted_content"],
        reasoning={"effort": "low"},
        parallel_tool_calls=False,
        metadata={"k": "v"},
        prompt_cache_key="x",
        some_future_key={"any": "thing"},
    )
    assert got == Conversation(
        model="dev-model",
        messages=[
            {"role": "system", "content": "Be brief.\n\nUse tools."},
            {"role": "user", "content": "ab"},
        ],
        tools=[
            {
                "type": "function",
                "function": {"name": "run", "description": "Run it.", "parameters": TOOL["parameters"]},
            }
        ],
        tool_choice=NamedTool("run"),
        output_format=OutputFormat("json_schema", {"type": "object"}, "out"),
        max_tokens=7,
        temperature=0.5,
        top_p=0.9,
        seed=3,
        stream=True,
    )


def test_defaults_and_the_simple_forms():
    got = conversation()
    assert got.messages == [{"role": "user", "content": "hi"}]
    assert (got.tools, got.tool_choice, got.output_format, got.max_tokens) == (None, "auto", None, None)
    assert (got.temperature, got.top_p, got.seed, got.stream, got.stop) == (1.0, 1.0, None, False, [])
    assert conversation(tools=[{"type": "function", "name": "f"}]).tools == [
        {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}}}}
    ]
    assert conversation(tools=[TOOL], tool_choice="required").tool_choice == "required"
    assert conversation(tool_choice="none").tool_choice == "none"
    assert conversation(text={"format": {"type": "json_object"}}).output_format == OutputFormat("json_object")
    assert conversation(text={"format": {"type": "text"}, "verbosity": "low"}).output_format is None
    assert conversation(previous_response_id=None, background=False).messages[0]["role"] == "user"


def test_an_assistant_turn_of_several_items_is_one_message():
    got = conversation(
        input=[
            {"role": "user", "content": "go"},
            {
                "type": "reasoning",
                "id": "rs_1",
                "summary": [{"type": "summary_text", "text": "sum"}],
                "content": [{"type": "reasoning_text", "text": "think"}],
                "encrypted_content": None,
            },
            {
                "type": "message",
                "role": "assistant",
                "id": "msg_1",
                "status": "completed",
                "content": [{"type": "output_text", "text": "ok", "annotations": []}],
            },
            {
                "type": "function_call",
                "call_id": "c1",
                "name": "run",
                "arguments": '{"path": "a"}',
                "id": "fc_1",
            },
            {"type": "function_call", "call_id": "c2", "name": "run", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "out1"},
            {
                "type": "function_call_output",
                "call_id": "c2",
                "output": [{"type": "input_text", "text": "out2"}],
            },
            {"type": "function_call_output", "call_id": "unknown", "output": "x"},
            {"type": "reasoning", "summary": [{"type": "summary_text", "text": "only a summary"}]},
            {"role": "assistant", "content": "first"},
            {"role": "assistant", "content": [{"type": "refusal", "refusal": "second"}]},
            {"role": "system", "content": "late"},
        ]
    )
    calls = [
        {"id": "c1", "type": "function", "function": {"name": "run", "arguments": '{"path": "a"}'}},
        {"id": "c2", "type": "function", "function": {"name": "run", "arguments": "{}"}},
    ]
    assert got.messages == [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": "ok", "reasoning_content": "think", "tool_calls": calls},
        {"role": "tool", "content": "out1", "tool_call_id": "c1", "name": "run"},
        {"role": "tool", "content": "out2", "tool_call_id": "c2", "name": "run"},
        {"role": "tool", "content": "x", "tool_call_id": "unknown"},
        {"role": "assistant", "content": "firstsecond", "reasoning_content": "only a summary"},
        {"role": "system", "content": "late"},
    ]


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ([], None),
        ("text", None),
        ({"input": "x"}, "model"),
        ({"model": "", "input": "x"}, "model"),
        ({"model": 5, "input": "x"}, "model"),
        ({"model": "m"}, "input"),
        ({**BASE, "input": 5}, "input"),
        ({**BASE, "input": []}, "input"),
        ({**BASE, "input": [5]}, "input[0]"),
        ({**BASE, "input": [{"type": "web_search_call"}]}, "input[0]"),
        ({**BASE, "input": [{"type": 5}]}, "input[0]"),
        ({**BASE, "input": [{"role": "tool", "content": "x"}]}, "input[0].role"),
        ({**BASE, "input": [{"role": "user"}]}, "input[0].content"),
        (
            {**BASE, "input": [{"role": "user", "content": [{"type": "input_image", "image_url": "u"}]}]},
            "input[0].content[0]",
        ),
        (
            {**BASE, "input": [{"role": "user", "content": [{"type": "input_text", "text": 5}]}]},
            "input[0].content[0].text",
        ),
        ({**BASE, "input": [{"type": "function_call", "call_id": "c", "arguments": "{}"}]}, "input[0].name"),
        (
            {**BASE, "input": [{"type": "function_call", "call_id": "", "name": "f", "arguments": "{}"}]},
            "input[0].call_id",
        ),
        (
            {**BASE, "input": [{"type": "function_call", "call_id": "c", "name": "f", "arguments": {}}]},
            "input[0].arguments",
        ),
        ({**BASE, "input": [{"type": "function_call_output", "call_id": "c"}]}, "input[0].output"),
        ({**BASE, "input": [{"type": "reasoning", "summary": "x"}]}, "input[0].summary"),
        ({**BASE, "input": [{"role": "system", "content": "only"}]}, "input"),
        (
            {**BASE, "input": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]},
            "input",
        ),
        (
            {
                **BASE,
                "input": [
                    {"role": "user", "content": "q"},
                    {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"},
                ],
            },
            "input",
        ),
        ({**BASE, "instructions": 5}, "instructions"),
        ({**BASE, "tools": {"type": "function"}}, "tools"),
        ({**BASE, "tools": [{"name": "x"}]}, "tools[0]"),
        ({**BASE, "tools": [{"type": "auto", "name": "x"}]}, "tools[0]"),
        ({**BASE, "tools": [{"type": "function"}]}, "tools[0].name"),
        ({**BASE, "tools": [{"type": "function", "name": "f", "parameters": "x"}]}, "tools[0].parameters"),
        ({**BASE, "tools": [TOOL, TOOL]}, "tools[1].name"),
        ({**BASE, "tool_choice": "any"}, "tool_choice"),
        ({**BASE, "tool_choice": "required"}, "tool_choice"),
        ({**BASE, "tools": [TOOL], "tool_choice": {"type": "function", "name": "other"}}, "tool_choice"),
        (
            {**BASE, "tools": [TOOL], "tool_choice": {"type": "allowed_tools", "tools": []}},
            "tool_choice.type",
        ),
        ({**BASE, "text": {"format": {"type": "json_schema", "name": "n"}}}, "text.format.schema"),
        ({**BASE, "text": {"format": {"type": "grammar"}}}, "text.format"),
        ({**BASE, "max_output_tokens": 0}, "max_output_tokens"),
        ({**BASE, "max_output_tokens": "9"}, "max_output_tokens"),
        ({**BASE, "max_output_tokens": True}, "max_output_tokens"),
        ({**BASE, "temperature": 2.5}, "temperature"),
        ({**BASE, "temperature": "1"}, "temperature"),
        ({**BASE, "top_p": -0.1}, "top_p"),
        ({**BASE, "seed": -1}, "seed"),
        ({**BASE, "stream": "yes"}, "stream"),
        ({**BASE, "previous_response_id": "resp_1"}, "previous_response_id"),
        ({**BASE, "conversation": "conv_1"}, "conversation"),
        ({**BASE, "prompt": {"id": "p"}}, "prompt"),
        ({**BASE, "background": True}, "background"),
        ({**BASE, "include": ["message.output_text.logprobs"]}, "include"),  # Chat Completions has them
        ({**BASE, "include": "reasoning.encrypted_content"}, "include"),
        ({**BASE, "top_logprobs": 21}, "top_logprobs"),
    ],
)
def test_each_wrong_field_is_one_400_naming_it(body, param):
    error = refused(body)
    assert error.param == param, error.message
    assert error.message and "Traceback" not in error.message


def test_nesting_is_bounded():
    deep: Any = {}
    for _ in range(100):
        deep = {"a": deep}
    assert refused({**BASE, "tools": [{**TOOL, "parameters": deep}]}).code == "too_deep"


# -- answers -------------------------------------------------------------------------------------
def turn(content="Hello there", reasoning=None, calls=(), finish="stop") -> AssistantTurn:
    return AssistantTurn(
        content=content,
        reasoning=reasoning,
        tool_calls=list(calls),
        finish_reason=finish,
        prompt_tokens=11,
        completion_tokens=5,
    )


def run_stream(body: dict[str, Any], events: list) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    request, _ = parse_request(body)
    stream = ResponseStream(request)
    out = stream.start()
    for event in events:
        out += stream.on(event)
    for event in out:
        EVENT.validate_python(event)  # every event is one of the SDK's stream event types
    assert [e["sequence_number"] for e in out] == list(range(len(out)))
    return out, stream.final


def test_a_streamed_answer_with_reasoning_text_and_calls():
    calls = [ToolCall("call_1", "run", '{"path": "a.py"}'), ToolCall("call_2", "run", "{}")]
    done = turn("Running it.", "I should run it.", calls, "tool_calls")
    events, final = run_stream(
        {**BASE, "tools": [TOOL], "stream": True},
        [
            ReasoningDelta("I should "),
            ReasoningDelta("run it."),
            ContentDelta("Running"),
            ContentDelta(" it."),
            TurnDone(done),
        ],
    )
    kinds = [e["type"] for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] == "response.completed"
    assert (
        "".join(e["delta"] for e in events if e["type"] == "response.reasoning_text.delta")
        == "I should run it."
    )
    assert "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta") == "Running it."
    assert [e["arguments"] for e in events if e["type"] == "response.function_call_arguments.done"] == [
        '{"path": "a.py"}',
        "{}",
    ]
    response = Response.model_validate(final)
    assert response.status == "completed" and response.output_text == "Running it."
    assert [o.type for o in response.output] == ["reasoning", "message", "function_call", "function_call"]
    assert [(o.call_id, o.name) for o in response.output[2:]] == [("call_1", "run"), ("call_2", "run")]
    assert response.usage.input_tokens == 11 and response.usage.output_tokens == 5
    added = [e["output_index"] for e in events if e["type"] == "response.output_item.added"]
    assert added == [0, 1, 2, 3]
    assert [e["item"] for e in events if e["type"] == "response.output_item.done"] == final["output"]


def test_the_whole_answer_is_the_streams_last_word():
    # the final text may hold more than was streamed (a call that did not parse stays content)
    events, final = run_stream(BASE, [ContentDelta("Hi"), TurnDone(turn("Hi <tool_call>{bad"))])
    assert (
        "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
        == "Hi <tool_call>{bad"
    )
    assert Response.model_validate(final).output_text == "Hi <tool_call>{bad"
    # no delta at all: the message is still there, whole
    _, final = run_stream(BASE, [TurnDone(turn("All at once"))])
    assert Response.model_validate(final).output_text == "All at once"
    # an empty answer is an empty message, not an empty output
    _, final = run_stream(BASE, [TurnDone(turn(""))])
    assert [o["type"] for o in final["output"]] == ["message"]


def test_a_cut_answer_is_incomplete():
    events, final = run_stream(
        {**BASE, "max_output_tokens": 5}, [ContentDelta("abc"), TurnDone(turn("abc", finish="length"))]
    )
    assert events[-1]["type"] == "response.incomplete"
    response = Response.model_validate(final)
    assert response.status == "incomplete" and response.incomplete_details.reason == "max_output_tokens"
    assert response.max_output_tokens == 5


def test_the_response_echoes_what_was_asked():
    body = {
        **BASE,
        "instructions": "Be brief.",
        "tools": [TOOL],
        "tool_choice": {"type": "function", "name": "run"},
        "text": {"format": {"type": "json_schema", "name": "o", "schema": {"type": "object"}}},
        "temperature": 0.3,
        "top_p": 0.8,
    }
    _, final = run_stream(body, [TurnDone(turn("{}"))])
    response = Response.model_validate(final)
    assert response.instructions == "Be brief." and response.model == "dev-model"
    assert response.tool_choice.name == "run" and response.tools[0].name == "run"
    assert response.text.format.type == "json_schema" and (response.temperature, response.top_p) == (0.3, 0.8)


def test_an_error_mid_stream_is_an_error_event_then_failed():
    request, _ = parse_request(BASE)
    stream = ResponseStream(request)
    stream.start()
    stream.on(ContentDelta("x"))
    out = stream.fail(WireError("the policy server failed", "upstream"))
    for event in out:
        EVENT.validate_python(event)
    assert [e["type"] for e in out] == ["error", "response.failed"]
    assert out[1]["response"]["error"]["code"] == "server_error"


def test_error_bodies_are_openais_shape():
    assert error_body(WireError("bad", param="input", code="c")) == {
        "error": {"message": "bad", "type": "invalid_request_error", "param": "input", "code": "c"}
    }
    assert error_body(WireError("no key", "authentication"))["error"]["type"] == "authentication_error"


def test_an_answer_sent_back_as_input_is_the_message_the_session_recorded():
    calls = [ToolCall("call_1", "run", '{"path": "a.py"}')]
    done = turn("Running it.", "Plan.", calls, "tool_calls")
    _, final = run_stream({**BASE, "tools": [TOOL]}, [ContentDelta("Running"), TurnDone(done)])
    # as the openai SDK re-sends it: each output item dumped (ids, statuses and all)
    items = [item.model_dump(exclude_none=True) for item in Response.model_validate(final).output]
    outputs = [{"type": "function_call_output", "call_id": "call_1", "output": "ok"}]
    got = conversation(input=[{"role": "user", "content": "hi"}, *items, *outputs], tools=[TOOL])
    assert got.messages[1] == {
        "role": "assistant",
        "content": "Running it.",
        "reasoning_content": "Plan.",
        "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "run", "arguments": '{"path": "a.py"}'}}
        ],
    }
    assert got.messages[2] == {"role": "tool", "content": "ok", "tool_call_id": "call_1", "name": "run"}


# -- the route -----------------------------------------------------------------------------------
async def test_the_route_answers_whole_and_streamed():
    events = [ContentDelta("Hel"), ContentDelta("lo"), TurnDone(turn("Hello"))]
    service = FakeService(events)
    client = await client_for(add_routes, service)
    try:
        whole = await client.post("/v1/responses", json=BASE)
        assert whole.status == 200
        assert Response.model_validate(await whole.json()).output_text == "Hello"
        streamed = await client.post("/v1/responses", json={**BASE, "stream": True})
        assert streamed.status == 200 and streamed.headers["Content-Type"].startswith("text/event-stream")
        got = sse_events(await streamed.text())
        assert got[-1]["type"] == "response.completed"
        assert service.closed and len(service.seen) == 2
    finally:
        await client.close()


async def test_the_route_refuses_in_openais_shape_before_and_during_a_stream():
    service = FakeService([], refuse=WireError("busy", "overloaded"))
    client = await client_for(add_routes, service)
    try:
        refused_ = await client.post("/v1/responses", json={**BASE, "stream": True})
        assert refused_.status == 503 and (await refused_.json())["error"]["message"] == "busy"
        bad = await client.post("/v1/responses", data=b"{not json")
        assert bad.status == 400 and (await bad.json())["error"]["type"] == "invalid_request_error"
        wrong = await client.post("/v1/responses", json={**BASE, "previous_response_id": "r"})
        assert wrong.status == 400 and (await wrong.json())["error"]["param"] == "previous_response_id"
        assert service.counts["bad_requests"] == 2 and len(service.seen) == 1
    finally:
        await client.close()
    client = await client_for(add_routes, FakeService([ContentDelta("x"), TurnDone(turn("x"))], fail_after=1))
    try:
        streamed = await client.post("/v1/responses", json={**BASE, "stream": True})
        assert streamed.status == 200
        assert [e["type"] for e in sse_events(await streamed.text())][-2:] == ["error", "response.failed"]
        whole = await client.post("/v1/responses", json=BASE)
        assert whole.status == 502 and (await whole.json())["error"]["type"] == "server_error"
    finally:
        await client.close()


def test_namespace_functions_are_offered_and_hosted_tools_left_out():
    """Codex CLI 0.171 always sends a `namespace` tool and `web_search` (captured first request)."""
    fn = {"type": "function", "name": "exec_command", "parameters": {"type": "object", "properties": {}}}
    sub = {"type": "function", "name": "spawn_agent", "parameters": {"type": "object", "properties": {}}}
    body = {
        **BASE,
        "tools": [
            fn,
            {"type": "namespace", "name": "multi_agent_v1", "description": "d", "tools": [sub]},
            {"type": "web_search", "external_web_access": False},
        ],
    }
    _, conv = parse_request(body)
    assert [t["function"]["name"] for t in conv.tools] == ["exec_command", "spawn_agent"]
    _, only_hosted = parse_request({**BASE, "tools": [{"type": "web_search"}]})
    assert only_hosted.tools is None
