"""Parsing Hermes/Qwen <tool_call> blocks: good calls survive next to bad ones, in order."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from environments.rollout.tool_calls import ParsedTurn, ToolCall, ToolCallError, parse_tool_calls

KNOWN = {"terminal", "write_file", "read_file", "patch"}


def block(payload: object) -> str:
    return f"<tool_call>\n{json.dumps(payload)}\n</tool_call>"


def test_plain_text_has_no_calls():
    turn = parse_tool_calls("  Just an answer.  ", KNOWN)
    assert turn == ParsedTurn(content="Just an answer.", calls=[])


def test_one_valid_call_and_surrounding_content():
    text = "Let me look.\n" + block({"name": "terminal", "arguments": {"command": "ls"}})
    turn = parse_tool_calls(text, KNOWN, id_prefix="t1")
    assert turn.content == "Let me look."
    assert turn.calls == [
        ToolCall(
            name="terminal",
            arguments={"command": "ls"},
            raw=block({"name": "terminal", "arguments": {"command": "ls"}}),
            id="t1_0",
        )
    ]


def test_mixed_valid_and_invalid_calls_keep_order_and_valid_ones():
    text = (
        "Plan: several steps.\n"
        + block({"name": "write_file", "arguments": {"path": "a.py", "content": "x = 1\n"}})
        + "\n<tool_call>{not json}</tool_call>\n"
        + block({"name": "rm_rf", "arguments": {}})
        + block({"arguments": {"command": "ls"}})
        + block({"name": "terminal", "arguments": ["ls"]})
        + block({"name": "terminal", "arguments": {"command": "python3 a.py"}})
    )
    turn = parse_tool_calls(text, KNOWN, id_prefix="c")
    kinds = [type(c).__name__ for c in turn.calls]
    assert kinds == [
        "ToolCall",
        "ToolCallError",
        "ToolCallError",
        "ToolCallError",
        "ToolCallError",
        "ToolCall",
    ]
    assert [c.id for c in turn.calls] == [f"c_{i}" for i in range(6)]
    assert [c.name for c in turn.valid_calls] == ["write_file", "terminal"]
    assert turn.valid_calls[1].arguments == {"command": "python3 a.py"}
    reasons = [e.reason for e in turn.errors]
    assert "not valid JSON" in reasons[0]
    assert "unknown tool 'rm_rf'" in reasons[1] and "terminal" in reasons[1]
    assert turn.errors[1].name == "rm_rf"
    assert 'no "name"' in reasons[2]
    assert '"arguments" must be a JSON object, got list' in reasons[3]
    assert turn.content == "Plan: several steps."


def test_unclosed_tag_is_an_error_and_earlier_calls_survive():
    text = (
        block({"name": "terminal", "arguments": {"command": "ls"}})
        + '\n<tool_call>{"name": "terminal", "argu'
    )
    turn = parse_tool_calls(text, KNOWN)
    assert isinstance(turn.calls[0], ToolCall)
    assert isinstance(turn.calls[1], ToolCallError)
    assert "unclosed <tool_call>" in turn.calls[1].reason
    assert turn.calls[1].raw.startswith("<tool_call>{")
    assert turn.content == ""


def test_unclosed_tag_followed_by_a_new_call():
    good = block({"name": "read_file", "arguments": {"path": "a.py"}})
    turn = parse_tool_calls('<tool_call>{"name": "terminal", ' + good, KNOWN)
    assert [type(c) for c in turn.calls] == [ToolCallError, ToolCall]
    assert "a new <tool_call> began" in turn.calls[0].reason
    assert turn.calls[1].arguments == {"path": "a.py"}


def test_arguments_as_json_string():
    payload = {"name": "terminal", "arguments": json.dumps({"command": "echo hi"})}
    turn = parse_tool_calls(block(payload), KNOWN)
    assert turn.calls[0] == ToolCall(
        name="terminal", arguments={"command": "echo hi"}, raw=block(payload), id=turn.calls[0].id
    )


def test_arguments_string_that_is_not_an_object_or_not_json():
    bad_json = parse_tool_calls(block({"name": "terminal", "arguments": "{oops"}), KNOWN).calls[0]
    assert isinstance(bad_json, ToolCallError) and "string that is not valid JSON" in bad_json.reason
    not_object = parse_tool_calls(block({"name": "terminal", "arguments": "[1, 2]"}), KNOWN).calls[0]
    assert isinstance(not_object, ToolCallError) and "got list" in not_object.reason


def test_missing_arguments_means_empty_object():
    call = parse_tool_calls(block({"name": "terminal"}), KNOWN).calls[0]
    assert isinstance(call, ToolCall) and call.arguments == {}


def test_non_object_payload_and_empty_name():
    turn = parse_tool_calls(block("terminal") + block({"name": "  ", "arguments": {}}), KNOWN)
    assert "must be a JSON object, got str" in turn.calls[0].reason
    assert 'no "name"' in turn.calls[1].reason


def test_closing_tag_inside_a_json_string_is_not_the_end():
    content = "print('</tool_call>')\n"
    payload = {"name": "write_file", "arguments": {"path": "t.py", "content": content}}
    turn = parse_tool_calls("x " + block(payload) + " y", KNOWN)
    assert len(turn.calls) == 1 and isinstance(turn.calls[0], ToolCall)
    assert turn.calls[0].arguments["content"] == content
    assert turn.content == "x  y"


def test_a_list_payload_gives_one_entry_per_call():
    payload = [{"name": "terminal", "arguments": {"command": "ls"}}, {"name": "nope"}]
    turn = parse_tool_calls(block(payload), KNOWN)
    assert [type(c) for c in turn.calls] == [ToolCall, ToolCallError]


def test_known_tools_none_accepts_any_name():
    assert isinstance(parse_tool_calls(block({"name": "anything", "arguments": {}})).calls[0], ToolCall)


def test_default_ids_are_unique_across_turns():
    text = block({"name": "terminal", "arguments": {"command": "ls"}})
    first, second = parse_tool_calls(text, KNOWN), parse_tool_calls(text, KNOWN)
    assert first.calls[0].id != second.calls[0].id


@given(st.text(max_size=300))
def test_never_raises_and_never_dispatches_garbage(text):
    turn = parse_tool_calls(text, KNOWN)
    for call in turn.valid_calls:
        assert call.name in KNOWN and isinstance(call.arguments, dict)


@given(
    st.lists(
        st.one_of(
            st.fixed_dictionaries(
                {
                    "name": st.sampled_from(sorted(KNOWN)),
                    "arguments": st.dictionaries(st.text(max_size=5), st.integers()),
                }
            ),
            st.text(max_size=20).map(lambda s: s.replace("<", "")),
        ),
        max_size=6,
    )
)
def test_every_block_becomes_exactly_one_entry(items):
    text = "".join(
        block(item) if isinstance(item, dict) else f"<tool_call>{item}</tool_call>" for item in items
    )
    turn = parse_tool_calls(text, KNOWN)
    assert len(turn.calls) == len(items)
    for item, call in zip(items, turn.calls, strict=True):
        assert isinstance(call, ToolCall) == (isinstance(item, dict))
