"""environments/proxy/pattern_grammar.py: a `pattern` becomes a grammar of exactly the JSON strings
(as `tojson` writes them) whose text the pattern matches, with JSON Schema's search semantics and
ECMA-262's classes; what it cannot honour is refused by name. Checked with xgrammar, the compiler
vLLM runs the grammars through, against Python's `re` as the oracle."""

from __future__ import annotations

import json
import re

import pytest

from environments.proxy.output_grammar import GrammarError, schema_grammar
from environments.proxy.pattern_grammar import PatternError, pattern_grammar

xgr = pytest.importorskip("xgrammar")
from xgrammar.testing import _is_grammar_accept_string  # noqa: E402

PATTERNS = [
    r"^[a-z]+$",
    r"^\d{4}-\d{2}-\d{2}$",
    r"abc",
    r"^(foo|bar)+$",
    r'^[^"\\]*$',
    r"^.{2,3}$",
    r"^\w+@\w+\.com$",
    r"^a.*b$",
    r"^[é-ü]+$",
    r"^(\d+|[A-F]+)?$",
    r'^say "hi"$',
    "^\n?x$",
    r"^[\x00-\x1f]$",
    r"x$",
    r"^\D\W$",
    r"^[^a-z\d]{1,2}$",
    r"^a+?b*?$",
]
TEXTS = [
    "",
    "a",
    "abc",
    "zabcz",
    "ABC",
    "foo",
    "foobar",
    "fooba",
    "2024-01-05",
    "2024-1-05",
    "٢٠٢٤-01-05",
    'a"b',
    "back\\slash",
    "line\nbreak",
    "\nx",
    "x",
    "tab\t",
    "\x01",
    "\x1f",
    "é",
    "ëü",
    "日本",
    "😀",
    "ab",
    "a\nb",
    "axxb",
    "me@host.com",
    "me@host.org",
    "12",
    "FF",
    "12FF",
    'say "hi"',
    "say hi",
    "xx\n",
    "!?",
    "-_",
    "aab",
    "ab!",
    " ",
    "a b",
]


def accepts(grammar: str, text: str) -> bool:
    return _is_grammar_accept_string(xgr.Grammar.from_ebnf(grammar), text)


def oracle(pattern: str, text: str) -> bool:
    """ECMA-262's reading: ASCII classes, and `$` only at the very end."""
    return (
        re.search(pattern.removesuffix("$") + r"\Z" if pattern.endswith("$") else pattern, text, re.ASCII)
        is not None
    )


@pytest.mark.parametrize("pattern", PATTERNS)
def test_a_pattern_accepts_exactly_the_json_strings_it_matches(pattern):
    grammar = f"root ::= {pattern_grammar(pattern)}\n"
    compiled = xgr.Grammar.from_ebnf(grammar)
    for text in TEXTS:
        written = json.dumps(text, ensure_ascii=False)
        assert _is_grammar_accept_string(compiled, written) == oracle(pattern, text), (pattern, text)


def test_only_the_templates_own_writing_of_a_string_is_accepted():
    any_text = pattern_grammar(r"^[\s\S]*$")
    grammar = f"root ::= {any_text}\n"
    assert accepts(grammar, '"a\\nb\\"c\\\\d\\u001f é"')
    for other in ('"\\u0041"', '"\\/"', '"a\\u000ab"', '"\\u00e9"', '"a\nb"'):
        assert not accepts(grammar, other), other  # escapes json.dumps does not write, a raw newline


@pytest.mark.parametrize(
    ("pattern", "what"),
    [
        (r"(a)\1", "back-reference"),
        (r"(?=a)a", "look-around"),
        (r"(?<!a)b", "look-around"),
        (r"(?i)abc", "flags"),
        (r"a(?i:b)", "flags"),
        (r"a^b", "anchor"),
        (r"\ba\b", "anchor"),
        (r"\p{L}", "regular expression"),
        (r"(?<name>a)", "regular expression"),
        (r"a{1000}", "repeat over"),
        (r"(a{100}){100}", "nested repeats"),
        (r"(?>a)", "atomic"),
        (r"a*+", "possessive"),
        ("x" * 1001, "at most"),
        (7, "must be a string"),
    ],
)
def test_what_a_pattern_grammar_cannot_honour_is_refused_by_name(pattern, what):
    with pytest.raises(PatternError, match=what):
        pattern_grammar(pattern)


def test_a_schema_with_a_pattern_is_constrained_and_lengths_with_it_refused():
    schema = {
        "type": "object",
        "properties": {
            "day": {"type": "string", "pattern": r"^\d{4}-\d{2}-\d{2}$"},
            "any": {"pattern": "^x"},
        },
        "required": ["day", "any"],
    }
    grammar = schema_grammar(schema)
    assert accepts(grammar, '{"day": "2024-01-05", "any": "xy"}')
    assert accepts(grammar, '{"day": "2024-01-05", "any": 3}')  # a pattern bounds strings only
    assert not accepts(grammar, '{"day": "2024-1-05", "any": "xy"}')
    assert not accepts(grammar, '{"day": "2024-01-05", "any": "yx"}')
    with pytest.raises(GrammarError, match=r"schema: cannot constrain .* 'pattern' and lengths"):
        schema_grammar({"type": "string", "pattern": "^a", "maxLength": 3})
    with pytest.raises(GrammarError, match="look-around"):
        schema_grammar({"type": "string", "pattern": "(?=a)"})
