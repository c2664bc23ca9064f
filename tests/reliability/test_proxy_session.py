"""The proxy's pure parts: request validation, history comparison, session continuation and forks,
and the per-turn cut (environments/proxy/).
The tests of its parts that need no server: tests/unit/test_proxy_session.py."""

from __future__ import annotations

import pytest

from environments.proxy.chat_completions.request import parse_request
from environments.proxy.conversation import NamedTool, WireError
from tests.support.proxy_session import body

TOOLS = [{"type": "function", "function": {"name": "write_file", "parameters": {"type": "object"}}}]


@pytest.mark.reliability
@pytest.mark.parametrize(
    ("request_body", "message", "param"),
    [
        ([], "the request body must be a JSON object", None),
        ({"messages": [{"role": "user", "content": "x"}]}, "'model' is required", "model"),
        (body(messages=[]), "'messages' must be a non-empty list", "messages"),
        (
            body(messages=[{"role": "wizard", "content": "x"}]),
            "messages[0].role must be one of ['assistant', 'developer', 'system', 'tool', 'user'], got 'wizard'",
            "messages[0].role",
        ),
        (
            body(messages=[{"role": "user", "content": 3}]),
            "messages[0].content must be a string or a list of parts",
            "messages[0].content",
        ),
        (
            body(messages=[{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]),
            "messages[0].content: only text parts are supported",
            "messages[0].content",
        ),
        (
            body(messages=[{"role": "tool", "content": "r"}]),
            "messages[0]: a tool message needs a 'tool_call_id' string",
            "messages[0].tool_call_id",
        ),
        (
            body(messages=[{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]),
            "the last message must not be an assistant message (no prefill)",
            "messages",
        ),
        (body(n=2), "only n=1 is supported", "n"),
        (body(temperature=3), "'temperature' must be a number in [0.0, 2.0], got 3", "temperature"),
        (body(max_tokens=0), "'max_tokens' must be an integer >= 1, got 0", "max_tokens"),
        (
            body(tool_choice="sometimes"),
            "tool_choice must be one of ['auto', 'none', 'required'] or a function, got 'sometimes'",
            "tool_choice",
        ),
        (body(tool_choice="required"), "tool_choice 'required' needs tools", "tool_choice"),
        (
            body(tools=TOOLS, tool_choice={"type": "function", "function": {"name": "read_file"}}),
            "tool_choice names 'read_file', which is not among the tools",
            "tool_choice",
        ),
        (
            body(tools=[{"type": "function"}]),
            "tools[0] must be {'type': 'function', 'function': {...}}",
            "tools[0]",
        ),
        (body(stream="yes"), "'stream' must be a boolean", "stream"),
        (body(stop=[1]), "'stop' must be a string or a list of strings", "stop"),
    ],
)
def test_malformed_requests_are_refused_with_the_openai_fields(request_body, message, param):
    with pytest.raises(WireError) as caught:
        parse_request(request_body)
    assert (str(caught.value), caught.value.param, caught.value.status) == (message, param, 400)


@pytest.mark.reliability
@pytest.mark.parametrize(
    ("tool_choice", "expected"),
    [
        ("required", "required"),
        ({"type": "function", "function": {"name": "write_file"}}, NamedTool("write_file")),
    ],
)
def test_required_and_named_tool_choices_are_accepted_with_tools(tool_choice, expected):
    chat, _ = parse_request(body(tools=TOOLS, tool_choice=tool_choice))
    assert chat.tool_choice == expected


@pytest.mark.reliability
def test_unknown_and_unused_parameters_are_ignored():
    chat, _ = parse_request(body(parallel_tool_calls=False, logprobs=True, user="u", not_a_field={"x": 1}))
    assert chat.messages == [{"role": "user", "content": "hi"}]


@pytest.mark.reliability
@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--host", "0.0.0.0"], "binding 0.0.0.0 needs API keys"),
        ([], "policy_base_url"),
    ],
)
def test_an_unusable_proxy_configuration_exits_2_with_one_line(capsys, extra, message):
    from hermes_opd.commands.proxy import main

    base = ["--policy-url", "http://127.0.0.1:9/v1"] if extra else []
    argv = [*base, "--policy-model", "m", "--tokenizer", "t", *extra]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("hermes-opd proxy: unusable configuration:") and message in err and "\n" not in err
