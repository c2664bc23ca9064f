"""The one bounded reader for untrusted JSON (hermes_opd/contract/bounded_json.py) and the one rule
for file names the project did not choose (environments/tasks/file_names.py): the pre-scan counts
exactly what the parser would build, every payload shape of issue 31 is refused before it is
decoded, and every traversal name is refused."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from environments.tasks.file_names import RESERVED, UnsafeFileName, checked_name
from environments.tasks.suite_format import MAX_REPORT_CHARS, MalformedResult, strict_json
from hermes_opd.contract import bounded_json
from hermes_opd.contract.bounded_json import (
    GROUPS_INPUT,
    OPERATOR_INPUT,
    BoundedJSONError,
    JSONBounds,
    check_bounds,
    loads_bounded,
)

TRICKY_TEXT = st.text(alphabet=st.sampled_from(list('ab"\\[]{},:') + ["\u00e9", "\n"]), max_size=12)
VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(10**6), 10**6) | TRICKY_TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TRICKY_TEXT, inner, max_size=4),
    max_leaves=30,
)


def counts(value) -> tuple[int, int]:
    """(what the pre-scan counts: 1 + containers + commas, the deepest nesting) of a parsed value."""
    if isinstance(value, list | dict):
        members = list(value.values()) if isinstance(value, dict) else value
        inner = [counts(m) for m in members]
        elements = 2 + max(len(members) - 1, 0) + sum(e - 1 for e, _ in inner)
        return elements, 1 + max((d for _, d in inner), default=0)
    return 1, 0


@settings(max_examples=150, deadline=None)
@given(VALUES, st.sampled_from([1, 2, 3, 7, 1 << 18]))
def test_the_pre_scan_counts_exactly_what_the_parser_builds_across_chunk_boundaries(value, chunk):
    raw = json.dumps(value, ensure_ascii=chunk % 2 == 0).encode()
    elements, depth = counts(value)
    saved = bounded_json._CHUNK
    bounded_json._CHUNK = chunk
    try:
        check_bounds(raw, JSONBounds(max_bytes=len(raw), max_depth=depth, max_elements=elements))
        if depth:
            with pytest.raises(BoundedJSONError, match="nested more than"):
                check_bounds(raw, JSONBounds(max_bytes=len(raw), max_depth=depth - 1, max_elements=elements))
        with pytest.raises(BoundedJSONError, match="more than .* values"):
            check_bounds(raw, JSONBounds(max_bytes=len(raw), max_depth=depth, max_elements=elements - 1))
    finally:
        bounded_json._CHUNK = saved
    assert loads_bounded(raw, JSONBounds(max_bytes=len(raw), max_depth=depth, max_elements=elements)) == value


def reply(value: str) -> bytes:
    """A reply as the solution's process would send it, cut at the relay's line bound."""
    return f'{{"id": 1, "value": {value}}}'.encode()[:MAX_REPORT_CHARS]


@pytest.mark.parametrize(
    "raw",
    [
        reply("[" + ", ".join(["{}"] * 2_000_000) + "]"),
        reply("[" + ", ".join(["0"] * 3_900_000) + "]"),
        reply('{"$set": [' + ", ".join(map(str, range(1_000_000))) + "]}"),
        reply("[" + ",".join(f'{{"$tuple":[{i}]}}' for i in range(560_000)) + "]"),
    ],
    ids=["2M-empty-dicts", "3.9M-zeros", "set-of-1M-ints", "560k-tuples"],
)
def test_every_reply_shape_of_issue_31_is_refused_before_it_is_decoded(raw, monkeypatch):
    monkeypatch.setattr(json, "loads", lambda *a, **k: pytest.fail("decoded"))
    with pytest.raises(MalformedResult, match="more than 100000 values"):
        strict_json(raw)


def test_a_reply_within_the_bounds_is_decoded_strictly():
    assert strict_json(b'{"id": 1, "value": [1, "a,[b", {"$tuple": [2]}]}') == {
        "id": 1,
        "value": [1, "a,[b", {"$tuple": [2]}],
    }
    for bad, why in [
        (b'{"a": 1, "a": 2}', "duplicate key"),
        (b"[NaN]", "non-standard JSON constant"),
        (b'["\xff"]', "not valid UTF-8"),
        (b"[" * 300 + b"]" * 300, "nested more than"),
        (b"[1, 2", "not valid JSON"),
    ]:
        with pytest.raises(MalformedResult, match=why):
            strict_json(bad)


def test_operator_input_bounds_numbers_and_depth():
    assert loads_bounded('{"n": 9223372036854775807, "x": -1.5e-7}', OPERATOR_INPUT) == {
        "n": 2**63 - 1,
        "x": -1.5e-7,
    }
    for bad, why in [
        ("[" + "9" * 100_000 + "]", "out of range"),
        ("[9223372036854775808]", "out of range"),
        ("[1e999]", "out of range"),
        ("[Infinity]", "non-standard JSON constant"),
        ("[" * 65 + "]" * 65, "nested more than 64"),
    ]:
        with pytest.raises(BoundedJSONError, match=why):
            loads_bounded(bad, OPERATOR_INPUT)
    # Groups files keep NaN/Infinity, which the contract's validator names as non_finite.
    assert loads_bounded("[-Infinity]", GROUPS_INPUT) == [float("-inf")]


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("/etc/cron.d/evil", "is absolute"),
        ("../../evil.py", "contains '..'"),
        ("pkg/../../evil.py", "contains '..'"),
        ("a\x00b.py", "a NUL byte"),
        ("", "is empty"),
        ("   ", "is empty"),
        ("a\nb.py", "a control character"),
        ("pkg//mod.py", "empty or '.' component"),
        ("./solution.py", "empty or '.' component"),
        ("pkg/", "empty or '.' component"),
        ("x" * 300, "longer than 255 bytes"),
        ("/".join(["d"] * 17), "has 17 components"),
        ("\ud800.py", "lone surrogate"),
        (".test-output", "reserved"),
        (7, "must be a string"),
    ],
)
def test_every_unsafe_file_name_is_refused_with_its_reason(name, why):
    with pytest.raises(UnsafeFileName, match=why):
        checked_name(name)


def test_plain_names_pass_and_every_verifier_file_is_reserved():
    from environments.rollout import verifier, verifier_rpc, verifier_stdio

    assert [checked_name(n) for n in ("solution.py", "pkg/mod.py", ".env", "données.py")] == [
        "solution.py",
        "pkg/mod.py",
        ".env",
        "données.py",
    ]
    ours = {verifier.TEST_OUTPUT_FILE, verifier_stdio.STDERR_FILE, verifier_rpc.REQUESTS_FIFO}
    ours |= {verifier_rpc.REPLIES_FIFO, verifier_rpc.CALLS_FIFO, verifier_rpc.RETURNS_FIFO, ".tests-output"}
    assert ours <= RESERVED


def test_a_tool_call_nested_100000_deep_is_an_error_result_not_a_crash():
    from environments.rollout.tool_calls import ToolCallError, parse_tool_calls

    deep = "[" * 100_000 + "]" * 100_000
    for body in (deep, '{"name": "terminal", "arguments": ' + json.dumps(deep) + "}"):
        turn = parse_tool_calls(f"<tool_call>{body}</tool_call>", {"terminal"})
        assert len(turn.calls) == 1 and isinstance(turn.calls[0], ToolCallError), turn.calls
        assert "not valid JSON" in turn.calls[0].reason
