"""A JSON Schema `pattern` as an EBNF expression for exactly the JSON strings whose text it matches,
written as the chat template's `tojson` (`json.dumps(ensure_ascii=False)`) writes them (pure logic).

The pattern is parsed by Python's own regular-expression parser (`re._parser`), and read with
ECMA-262's meaning where the two differ (`\\d` is `[0-9]`, `\\w` `[A-Za-z0-9_]`, `\\s` ECMA's
white space, `.` any character but a line terminator), with JSON Schema's search semantics: a
pattern not anchored by `^` (or `$`) may be preceded (or followed) by any text. A character class
becomes the class of the characters written as themselves plus the escapes JSON writes for the
others (`\\"`, `\\\\`, `\\n`, `\\u001f`, ...), so a string a client re-sends renders back to the text
that was sampled.

What a grammar cannot honour, or only at a cost a request must not impose, raises `PatternError`:
back-references, look-arounds, atomic groups and possessive repeats, flags (`(?i)`, ...), anchors
inside the pattern, repeats over `MAX_REPEAT` or nested beyond `MAX_EXPANSION`, and syntax Python's
parser does not read (`\\p{L}`, `(?<name>...)`)."""

from __future__ import annotations

import json
import re
from re import _constants as sre  # the opcodes of `re._parser`'s trees
from re import _parser as sre_parse
from typing import Any

from environments.proxy.ebnf import literal
from hermes_opd.contract.errors import HermesOPDError

MAX_PATTERN_CHARS = 1000
MAX_REPEAT = 256
"""A bounded repeat's largest count."""
MAX_EXPANSION = 4096
"""The largest product of the bounded counts of nested repeats (the grammar's size grows with it)."""
LAST = 0x10FFFF
SURROGATES = (0xD800, 0xDFFF)
Intervals = list[tuple[int, int]]

DIGIT: Intervals = [(0x30, 0x39)]
WORD: Intervals = [(0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A)]
SPACE: Intervals = [
    (0x09, 0x0D),
    (0x20, 0x20),
    (0xA0, 0xA0),
    (0x1680, 0x1680),
    (0x2000, 0x200A),
    (0x2028, 0x2029),
    (0x202F, 0x202F),
    (0x205F, 0x205F),
    (0x3000, 0x3000),
    (0xFEFF, 0xFEFF),
]
"""ECMA-262's white space and line terminators."""
LINE_TERMINATORS: Intervals = [(0x0A, 0x0A), (0x0D, 0x0D), (0x2028, 0x2029)]


class PatternError(HermesOPDError, ValueError):
    """A pattern a grammar here cannot honour; the message says why."""


ESCAPED = {c: json.dumps(chr(c))[1:-1] for c in [*range(0x20), 0x22, 0x5C]}
"""The characters JSON writes as escapes, and how `json.dumps` writes each."""


def _normal(intervals: Intervals) -> Intervals:
    """Sorted, merged, without surrogates."""
    out: Intervals = []
    for low, high in sorted(intervals):
        for a, b in ((low, min(high, SURROGATES[0] - 1)), (max(low, SURROGATES[1] + 1), high)):
            if a > b:
                continue
            if out and a <= out[-1][1] + 1:
                out[-1] = (out[-1][0], max(out[-1][1], b))
            else:
                out.append((a, b))
    return out


def _complement(intervals: Intervals) -> Intervals:
    out, at = [], 0
    for low, high in _normal(intervals):
        if at < low:
            out.append((at, low - 1))
        at = high + 1
    if at <= LAST:
        out.append((at, LAST))
    return _normal(out)


ANY_CHAR = _complement([])
UNESCAPED = _complement([(code, code) for code in ESCAPED])
DOT = _complement(LINE_TERMINATORS)


def _class_char(code: int) -> str:
    char = chr(code)
    return char if char.isascii() and char.isalnum() else f"\\U{code:08x}"


def chars_grammar(intervals: Intervals) -> str:
    """The EBNF for one character of `intervals`, as JSON writes it inside a string."""
    intervals = _normal(intervals)
    plain = _normal([piece for low, high in intervals for piece in _unescaped(low, high)])
    options = []
    if plain:
        options.append(
            "["
            + "".join(_class_char(a) if a == b else f"{_class_char(a)}-{_class_char(b)}" for a, b in plain)
            + "]"
        )
    options += [literal(text) for code, text in ESCAPED.items() if any(a <= code <= b for a, b in intervals)]
    if not options:
        raise PatternError("cannot constrain a string to a 'pattern' with a class that matches no character")
    return options[0] if len(options) == 1 else "(" + " | ".join(options) + ")"


def _unescaped(low: int, high: int) -> Intervals:
    """`[low, high]` without the characters JSON escapes."""
    return [(max(a, low), min(b, high)) for a, b in UNESCAPED if max(a, low) <= min(b, high)]


def pattern_grammar(pattern: Any) -> str:
    """A JSON string literal (quotes included) whose text `pattern` matches (search semantics)."""
    if not isinstance(pattern, str) or len(pattern) > MAX_PATTERN_CHARS:
        raise PatternError(f"'pattern' must be a string of at most {MAX_PATTERN_CHARS} characters")
    try:
        parsed = sre_parse.parse(pattern)
    except (re.error, OverflowError, RecursionError) as exc:
        raise PatternError(
            f"'pattern' {pattern!r:.80} is not a regular expression read here ({exc})"
        ) from None
    if parsed.state.flags & ~re.UNICODE:
        raise PatternError("cannot constrain a string to a 'pattern' with flags")
    items = list(parsed)
    branches = items[0][1][1] if len(items) == 1 and items[0][0] is sre.BRANCH else [items]
    reader = _Reader()
    body = " | ".join(reader.anchored(list(branch)) for branch in branches)
    return f'("\\"" ({body}) "\\"")'


class _Reader:
    """Reads a parsed pattern into EBNF, refusing what a grammar cannot honour."""

    @staticmethod
    def refuse(what: str) -> PatternError:
        return PatternError(f"cannot constrain a string to a 'pattern' with {what}")

    def anchored(self, items: list[Any]) -> str:
        """A top-level alternative: its `^` and `$` anchors, else any text before or after it."""
        starts = bool(items) and items[0] == (sre.AT, sre.AT_BEGINNING)
        ends = bool(items) and items[-1] == (sre.AT, sre.AT_END) and len(items) > int(starts)
        core = items[int(starts) : len(items) - int(ends)]
        anything = f"{chars_grammar(ANY_CHAR)}*"
        parts = ([] if starts else [anything]) + [self.sequence(core, 1)] + ([] if ends else [anything])
        return "(" + " ".join(p for p in parts if p) + ")"

    def sequence(self, items: list[Any], weight: int) -> str:
        parts = [self.item(op, av, weight) for op, av in items]
        return " ".join(parts) if parts else '""'

    def item(self, op: Any, av: Any, weight: int) -> str:
        if op is sre.LITERAL:
            return chars_grammar([(av, av)])
        if op is sre.NOT_LITERAL:
            return chars_grammar(_complement([(av, av)]))
        if op is sre.ANY:
            return chars_grammar(DOT)
        if op is sre.IN:
            return chars_grammar(self._set(av))
        if op is sre.BRANCH:
            return "(" + " | ".join(self.sequence(list(b), weight) for b in av[1]) + ")"
        if op is sre.SUBPATTERN:
            _group, add_flags, del_flags, sub = av
            if add_flags or del_flags:
                raise self.refuse("flags")
            return "(" + self.sequence(list(sub), weight) + ")"
        if op in (sre.MAX_REPEAT, sre.MIN_REPEAT):  # a lazy repeat matches the same strings
            low, high, sub = av
            bounded = high != sre.MAXREPEAT
            if low > MAX_REPEAT or (bounded and high > MAX_REPEAT):
                raise self.refuse(f"a repeat over {MAX_REPEAT}")
            weight *= max(low, high if bounded else 1, 1)
            if weight > MAX_EXPANSION:
                raise self.refuse(f"nested repeats over {MAX_EXPANSION} in all")
            inner = "(" + self.sequence(list(sub), weight) + ")"
            return f"{inner}{{{low},{high if bounded else ''}}}"
        if op is sre.AT:
            raise self.refuse("an anchor inside it (only a leading ^ and a trailing $)")
        names = {
            sre.GROUPREF: "a back-reference",
            sre.ASSERT: "a look-around",
            sre.ASSERT_NOT: "a look-around",
        }
        raise self.refuse(names.get(op, str(op).lower().replace("_", " ")))

    def _set(self, items: Any) -> Intervals:
        negate, intervals = False, []
        for op, av in items:
            if op is sre.NEGATE:
                negate = True
            elif op is sre.LITERAL:
                intervals.append((av, av))
            elif op is sre.RANGE:
                intervals.append(av)
            elif op is sre.CATEGORY:
                intervals += _category(av)
            else:
                raise self.refuse(f"{str(op).lower()} in a character class")
        return _complement(intervals) if negate else intervals


def _category(category: Any) -> Intervals:
    known = {
        sre.CATEGORY_DIGIT: DIGIT,
        sre.CATEGORY_WORD: WORD,
        sre.CATEGORY_SPACE: SPACE,
    }
    negated = {sre.CATEGORY_NOT_DIGIT: DIGIT, sre.CATEGORY_NOT_WORD: WORD, sre.CATEGORY_NOT_SPACE: SPACE}
    if category in known:
        return known[category]
    if category in negated:
        return _complement(negated[category])
    raise _Reader.refuse(f"the class {str(category).lower()}")
