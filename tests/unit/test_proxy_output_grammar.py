"""environments/proxy/output_grammar.py and tool_markup.py: a schema becomes a grammar that accepts
its JSON exactly as the chat template writes it (and nothing else), the tool-call markup is learnt
from the template, and a schema a grammar cannot honour is refused by name. The grammars are
checked with xgrammar, the compiler vLLM itself runs them through."""

from __future__ import annotations

import json
import math

import pytest

from environments.proxy.output_grammar import GrammarError, after_thinking, any_object_grammar, schema_grammar
from environments.proxy.tool_markup import call_markup, tool_call_grammar
from tests.support.proxy_factory import TOOLS

xgr = pytest.importorskip("xgrammar")
from xgrammar.testing import _is_grammar_accept_string  # noqa: E402


def accepts(grammar: str, text: str) -> bool:
    return _is_grammar_accept_string(xgr.Grammar.from_ebnf(grammar), text)


def tojson(value) -> str:
    return json.dumps(value, ensure_ascii=False)  # what HF's chat-template `tojson` writes


PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "kind": {"enum": ["a", "b"]},
        "score": {"type": ["number", "null"]},
    },
    "required": ["name", "age"],
}


def test_a_schema_grammar_takes_the_templates_json_and_nothing_else():
    grammar = schema_grammar(PERSON)
    for value in (
        {"name": "Ann", "age": 3},
        {"name": 'Bé "q"\n', "age": -10, "tags": [], "score": None},
        {"name": "x", "age": 0, "tags": ["a", "b"], "kind": "b", "score": 1.5},
    ):
        assert accepts(grammar, tojson(value)), value
    for text in (
        '{"name":"Ann","age":3}',
        '{"age": 3, "name": "Ann"}',
        '{"name": "Ann"}',
        '{"name": "Ann", "age": 3, "extra": 1}',
        '{"name": "Ann", "age": 3.5}',
        '{"name": "Ann", "age": 3, "kind": "c"}',
    ):
        assert not accepts(grammar, text), text


def test_refs_and_any_object():
    schema = {
        "$defs": {"P": {"type": "object", "properties": {"x": {"type": "boolean"}}, "required": ["x"]}},
        "type": "object",
        "properties": {"p": {"$ref": "#/$defs/P"}},
        "required": ["p"],
    }
    assert accepts(schema_grammar(schema), '{"p": {"x": true}}')
    assert accepts(any_object_grammar(), tojson({"a": [1, {"b": None}], "c": "d"}))
    assert not accepts(any_object_grammar(), "[1]")


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "string", "pattern": "(?=a)a"},
        {"type": "number", "minimum": 0.5},
        {"type": "number", "exclusiveMaximum": 1},
        {"type": "integer", "minimum": 5, "maximum": 4},
        {"type": "integer", "minimum": "3"},
        {"type": "integer", "maximum": 1e300},
        {"not": {}},
        {"type": "array", "maxItems": 2},
        {"$ref": "https://example.com/s.json"},
    ],
)
def test_what_a_grammar_cannot_honour_is_refused_by_name(schema):
    with pytest.raises(GrammarError):
        schema_grammar(schema)


def test_tool_calls_are_forced_in_the_templates_own_markup(dev_tokenizer):
    markup = call_markup(dev_tokenizer, TOOLS)
    run = {"id": "c0", "type": "function", "function": {"name": "run_python", "arguments": {"path": "a.py"}}}
    rendered = dev_tokenizer.apply_chat_template(
        [{"role": "user", "content": "x"}, {"role": "assistant", "content": "", "tool_calls": [run, run]}],
        tools=TOOLS,
        tokenize=False,
    )
    one = markup.before("run_python") + tojson({"path": "a.py"}) + markup.after
    assert one + markup.between + one in rendered
    required = tool_call_grammar(TOOLS, markup, None)
    named = tool_call_grammar(TOOLS, markup, "write_file")
    write = markup.before("write_file") + tojson({"path": "a.py", "content": "x"}) + markup.after
    assert accepts(required, one) and accepts(required, one + markup.between + write)
    assert (
        accepts(named, write)
        and not accepts(named, one)
        and not accepts(named, write + markup.between + write)
    )
    assert not accepts(required, "I will call it. " + one) and not accepts(required, "")
    with pytest.raises(GrammarError):
        tool_call_grammar(TOOLS, markup, "missing")


def test_a_forced_answer_may_follow_the_models_own_thinking(dev_tokenizer):
    markup = call_markup(dev_tokenizer, TOOLS)
    call = markup.before("run_python") + tojson({"path": "a.py"}) + markup.after
    forced = tool_call_grammar(TOOLS, markup, None)
    optional, opened = after_thinking(forced, opened=False), after_thinking(forced, opened=True)
    thought = "I run it first.\n<tool_call> is the markup; a < b and </thin are not the end.\n"
    assert accepts(optional, call) and accepts(optional, f"<think>\n{thought}</think>\n\n{call}")
    assert accepts(optional, f"<think></think>{call}")
    assert not accepts(optional, f"<think>\n{thought}</think>\n\n")  # the call is still forced
    assert not accepts(optional, f"<think>a</think>b</think>\n\n{call}")  # one block, closed once
    assert not accepts(optional, f"<think>a</think>\n\nSo: {call}")  # nothing but the call after it
    assert not accepts(optional, f"<think>a</think>\n\n\n\n\n{call}")  # at most four blanks
    assert not accepts(optional, f"Hmm <think>a</think>{call}")
    assert accepts(opened, f"{thought}</think>\n\n{call}") and not accepts(opened, call)
    response = after_thinking(schema_grammar(PERSON), opened=False)
    person = tojson({"name": "a", "age": 3})
    assert accepts(response, person) and accepts(response, f"<think>ok</think>\n{person}")
    assert not accepts(response, "<think>ok</think>\n{}")


INTEGER_BOUNDS = [
    {"minimum": 3},
    {"maximum": -7},
    {"minimum": 0, "maximum": 600},
    {"minimum": -120, "maximum": 35},
    {"minimum": -1000, "maximum": -98},
    {"exclusiveMinimum": 9, "exclusiveMaximum": 101},
    {"minimum": 2.5, "exclusiveMaximum": 19.5},
    {"minimum": 7, "maximum": 7},
    {"minimum": 1, "maximum": 1000000},
]


@pytest.mark.parametrize("bounds", INTEGER_BOUNDS)
def test_a_bounded_integer_takes_exactly_the_integers_in_range_as_json_writes_them(bounds):
    """Every integer from -1100 to 1100 and some far off: accepted exactly when the schema allows it."""
    grammar = schema_grammar(
        {"type": "object", "properties": {"n": {"type": "integer", **bounds}}, "required": ["n"]}
    )

    def allowed(n: int) -> bool:
        return (
            n >= bounds.get("minimum", -math.inf)
            and n <= bounds.get("maximum", math.inf)
            and n > bounds.get("exclusiveMinimum", -math.inf)
            and n < bounds.get("exclusiveMaximum", math.inf)
        )

    for n in [*range(-1100, 1101), 99999, 1000000, 1000001, -5000000, 12345678901]:
        assert accepts(grammar, tojson({"n": n})) == allowed(n), n
    for text in ('{"n": 007}', '{"n": -0}', '{"n": 3.0}', '{"n": +5}'):
        assert not accepts(grammar, text), text


NUMBER_BOUNDS = [(0, 1), (-1, 1), (-20, -3), (5, None), (None, -2), (0, 0), (3, 120)]


@pytest.mark.parametrize(("low", "high"), NUMBER_BOUNDS)
def test_a_bounded_number_takes_exactly_the_numbers_in_range_as_json_writes_them(low, high):
    schema = {"type": "number"}
    schema |= {"minimum": low} if low is not None else {}
    schema |= {"maximum": high} if high is not None else {}
    grammar = schema_grammar({"type": "object", "properties": {"x": schema}, "required": ["x"]})
    values = [n / 4 for n in range(-100, 501)] + [
        0.001,
        -0.001,
        1.05,
        119.999,
        120.0001,
    ]  # no exponents: jnumber writes none
    for x in values:
        inside = (low is None or x >= low) and (high is None or x <= high)
        assert accepts(grammar, tojson({"x": x})) == inside, x
    for text in ('{"x": 01.5}', '{"x": .5}', '{"x": 1.50}'):
        assert not accepts(grammar, text), text


def test_bounds_without_a_type_bound_the_numbers_and_let_every_other_value_through():
    grammar = schema_grammar({"minimum": 0, "maximum": 10})
    for value, ok in (
        (5, True),
        (10.0, True),
        (11, False),
        (-1, False),
        ("x", True),
        (None, True),
        ([1], True),
    ):
        assert accepts(grammar, tojson(value)) == ok, value
