"""What constrains an answer: a JSON schema (a tool's parameters, a `response_format`) as a grammar
in the EBNF that vLLM's structured outputs take (`structured_outputs: {"grammar": ...}`, compiled
by xgrammar), written so that the only JSON it accepts is the JSON the chat template writes
(`tojson`: `", "` and `": "` separators, properties in the schema's order, non-ASCII as is).
So a constrained tool call, re-sent by the client and re-rendered by the template, is the same
text the policy sampled (pure logic).

Numeric bounds are honoured for integers (`minimum`, `maximum`, `exclusiveMinimum`,
`exclusiveMaximum`) and, when whole and inclusive, for numbers (environments/proxy/numeric_grammar.py);
a string's `pattern` too (environments/proxy/pattern_grammar.py). Only what a grammar can honour is
accepted: a schema with a keyword it cannot express (`not`, a fractional or exclusive bound on a
number, a `pattern` with a look-around, ...) raises `GrammarError`, which the proxy answers with a
400 naming it."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from environments.proxy.ebnf import literal
from environments.proxy.numeric_grammar import integer_range, number_range
from environments.proxy.pattern_grammar import PatternError, pattern_grammar
from hermes_opd.contract.errors import HermesOPDError

MAX_RULES = 2000
"""A schema that needs more rules than this is refused (a request's cost must stay bounded)."""

NUMERIC_BOUNDS = frozenset({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"})
MAX_BOUND = 1e15
"""Numeric bounds beyond this are refused (the range's grammar grows with its digits)."""

ANNOTATIONS = frozenset(
    {
        "title",
        "description",
        "default",
        "examples",
        "$schema",
        "$id",
        "$comment",
        "format",
        "strict",
        "readOnly",
        "writeOnly",
        "deprecated",
        "additionalProperties",
        "nullable",
        "discriminator",
        "contentMediaType",
        "contentEncoding",
        "$defs",
        "definitions",
        "unevaluatedProperties",
    }
)
"""Keys that change nothing a grammar must enforce (`additionalProperties` is honoured by
emitting only the declared properties; `format` is an annotation in JSON Schema 2020-12)."""
HANDLED = (
    frozenset(
        {
            "type",
            "properties",
            "required",
            "items",
            "enum",
            "const",
            "anyOf",
            "oneOf",
            "allOf",
            "$ref",
            "minItems",
            "maxItems",
            "minLength",
            "maxLength",
            "pattern",
        }
    )
    | NUMERIC_BOUNDS
)

BASE_RULES = {
    "jstring": '"\\"" jchar* "\\""',
    "jchar": '[^"\\\\\\x00-\\x1f] | "\\\\" ["\\\\bfnrt] | "\\\\u00" [01] [0-9a-f]',
    "jinteger": '"-"? ("0" | [1-9] [0-9]*)',
    "jnumber": 'jinteger ("." ("0" | [0-9]* [1-9]))?',
    "jboolean": '"true" | "false"',
    "jnull": '"null"',
    "jvalue": "jobject | jarray | jstring | jnumber | jboolean | jnull",
    "jobject": '"{" (jstring ": " jvalue (", " jstring ": " jvalue)*)? "}"',
    "jarray": '"[" (jvalue (", " jvalue)*)? "]"',
}
"""Any JSON value as `json.dumps(ensure_ascii=False)` writes it."""


class GrammarError(HermesOPDError, ValueError):
    """A schema (or a request) whose constraint a grammar cannot honour; the message says why."""


def json_literal(value: Any) -> str:
    return literal(json.dumps(value, ensure_ascii=False))


@dataclass
class GrammarBuilder:
    """Collects rules; `schema(s)` returns an expression matching `s`'s JSON."""

    where: str = "schema"
    """Named in errors (e.g. `tools[0].function.parameters`)."""
    rules: dict[str, str] = field(default_factory=lambda: dict(BASE_RULES))
    _refs: dict[tuple[int, str], str] = field(default_factory=dict)
    _root: Any = None

    def top(self, schema: Any, where: str) -> str:
        """An expression for a whole schema (its `$ref`s resolve inside it), named `where` in errors."""
        self._root, self.where = schema, where
        return self.schema(schema)

    def rule(self, body: str, name: str | None = None) -> str:
        if len(self.rules) >= MAX_RULES:
            raise GrammarError(f"{self.where} is too complex to constrain (over {MAX_RULES} grammar rules)")
        name = name or f"r{len(self.rules)}"
        self.rules[name] = body
        return name

    def text(self, root: str) -> str:
        lines = [f"root ::= {root}"] + [f"{name} ::= {body}" for name, body in self.rules.items()]
        return "\n".join(lines) + "\n"

    def schema(self, schema: Any) -> str:
        if schema is True or schema == {}:
            return "jvalue"
        if not isinstance(schema, dict):
            raise GrammarError(f"{self.where}: a schema must be an object or true, got {schema!r:.80}")
        unknown = set(schema) - ANNOTATIONS - HANDLED
        if unknown:
            raise GrammarError(
                f"{self.where}: cannot constrain the output to a schema using {sorted(unknown)} "
                f"(supported: types, properties, required, items, enum, const, anyOf, oneOf, $ref, "
                f"minimum/maximum, pattern)"
            )
        if "$ref" in schema:
            return self._ref(schema["$ref"])
        if "const" in schema:
            return json_literal(schema["const"])
        if "enum" in schema:
            if not isinstance(schema["enum"], list) or not schema["enum"]:
                raise GrammarError(f"{self.where}: 'enum' must be a non-empty list")
            return "(" + " | ".join(json_literal(v) for v in schema["enum"]) + ")"
        for key in ("anyOf", "oneOf"):
            if key in schema:
                options = schema[key]
                if not isinstance(options, list) or not options:
                    raise GrammarError(f"{self.where}: {key!r} must be a non-empty list")
                return "(" + " | ".join(self.schema(o) for o in options) + ")"
        if "allOf" in schema:
            options = schema["allOf"]
            if not isinstance(options, list) or len(options) != 1:
                raise GrammarError(f"{self.where}: 'allOf' is supported with one schema only")
            return self.schema(options[0])
        kind = schema.get("type")
        if isinstance(kind, list):
            if not kind:
                raise GrammarError(f"{self.where}: 'type' must not be an empty list")
            return "(" + " | ".join(self.schema({**schema, "type": k}) for k in kind) + ")"
        return self._typed(kind, schema)

    def _typed(self, kind: Any, schema: dict[str, Any]) -> str:
        if kind is None:
            if "properties" in schema:
                kind = "object"
            elif "items" in schema:
                kind = "array"
            elif (bounded := bool(NUMERIC_BOUNDS & set(schema))) or "pattern" in schema:  # any
                # value, but a number only within the bounds and a string only as the pattern says
                number = self._typed("number", schema) if bounded else "jnumber"
                string = self._pattern(schema) if "pattern" in schema else "jstring"
                return f"(jobject | jarray | {string} | {number} | jboolean | jnull)"
            else:
                return "jvalue"
        if kind == "string":
            if "pattern" in schema:
                return self._pattern(schema)
            low, high = schema.get("minLength", 0), schema.get("maxLength")
            if (low, high) == (0, None):
                return "jstring"
            if (
                not isinstance(low, int)
                or (high is not None and not isinstance(high, int))
                or low > 1000
                or (high or 0) > 1000
            ):
                raise GrammarError(f"{self.where}: string lengths must be integers up to 1000")
            return f'("\\"" jchar{{{low},{high if high is not None else -1}}} "\\"")'
        if kind == "integer":
            low, high = self._integer_bounds(schema)
            return "jinteger" if (low, high) == (None, None) else self._bounded(integer_range, low, high)
        if kind == "number":
            low, high = self._number_bounds(schema)
            return "jnumber" if (low, high) == (None, None) else self._bounded(number_range, low, high)
        if kind == "boolean":
            return "jboolean"
        if kind == "null":
            return "jnull"
        if kind == "array":
            return self._array(schema)
        if kind == "object":
            return self._object(schema)
        raise GrammarError(f"{self.where}: unknown type {kind!r}")

    def _pattern(self, schema: dict[str, Any]) -> str:
        if "minLength" in schema or "maxLength" in schema:
            raise GrammarError(f"{self.where}: cannot constrain a string to a 'pattern' and lengths at once")
        try:
            return self.rule(pattern_grammar(schema["pattern"]))
        except PatternError as exc:
            raise GrammarError(f"{self.where}: {exc}") from None

    def _bound(self, schema: dict[str, Any], key: str) -> float | None:
        value = schema.get(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise GrammarError(f"{self.where}: {key!r} must be a finite number, got {value!r:.40}")
        if abs(value) > MAX_BOUND:
            raise GrammarError(f"{self.where}: {key!r} is beyond {MAX_BOUND:.0e}, too large to constrain")
        return value

    def _integer_bounds(self, schema: dict[str, Any]) -> tuple[int | None, int | None]:
        """The integers the bounds allow, as an inclusive range (None: unbounded)."""
        bound = {key: self._bound(schema, key) for key in NUMERIC_BOUNDS}
        lows, highs = [], []
        if bound["minimum"] is not None:
            lows.append(math.ceil(bound["minimum"]))
        if bound["exclusiveMinimum"] is not None:
            lows.append(math.floor(bound["exclusiveMinimum"]) + 1)
        if bound["maximum"] is not None:
            highs.append(math.floor(bound["maximum"]))
        if bound["exclusiveMaximum"] is not None:
            highs.append(math.ceil(bound["exclusiveMaximum"]) - 1)
        return (max(lows) if lows else None), (min(highs) if highs else None)

    def _number_bounds(self, schema: dict[str, Any]) -> tuple[int | None, int | None]:
        """Inclusive integer bounds; others (fractional, exclusive) a grammar here cannot honour."""
        for key in ("exclusiveMinimum", "exclusiveMaximum"):
            if self._bound(schema, key) is not None:
                raise GrammarError(
                    f"{self.where}: cannot constrain a number with {key!r} (use minimum/maximum)"
                )
        bounds = []
        for key in ("minimum", "maximum"):
            value = self._bound(schema, key)
            if value is not None and value != int(value):
                raise GrammarError(f"{self.where}: a number's {key!r} must be a whole number, got {value!r}")
            bounds.append(None if value is None else int(value))
        return bounds[0], bounds[1]

    def _bounded(self, expression: Callable[[int | None, int | None], str], low, high) -> str:
        if low is not None and high is not None and low > high:
            raise GrammarError(f"{self.where}: no number lies between the bounds {low} and {high}")
        return self.rule(expression(low, high))

    def _array(self, schema: dict[str, Any]) -> str:
        item = self.schema(schema.get("items", True))
        low, high = schema.get("minItems", 0), schema.get("maxItems")
        if low not in (0, 1) or high is not None:
            raise GrammarError(f"{self.where}: arrays are constrained with minItems 0 or 1 and no maxItems")
        items = f'{item} (", " {item})*'
        return f'("[" {items} "]")' if low == 1 else f'("[" ({items})? "]")'

    def _object(self, schema: dict[str, Any]) -> str:
        properties = schema.get("properties")
        if properties is None:
            extra = schema.get("additionalProperties", True)
            if extra is True or extra == {}:
                return "jobject"
            value = self.schema(extra)
            return f'("{{" (jstring ": " {value} (", " jstring ": " {value})*)? "}}")'
        if not isinstance(properties, dict):
            raise GrammarError(f"{self.where}: 'properties' must be an object")
        required = schema.get("required", [])
        if not isinstance(required, list) or not set(required) <= set(properties):
            raise GrammarError(f"{self.where}: 'required' must list declared properties")
        names = list(properties)
        pairs = [
            f"{literal(json.dumps(n, ensure_ascii=False) + ': ')} {self.schema(properties[n])}" for n in names
        ]
        # rest[i][first]: the properties from i on, in order, each optional one maybe left out;
        # `first`: no property written yet (so no comma before the next)
        rest: dict[tuple[int, bool], str] = {}
        for i in range(len(names), -1, -1):
            for first in (True, False):
                if i == len(names):
                    rest[(i, first)] = '""'
                    continue
                comma = "" if first else '", " '
                take = f"{comma}{pairs[i]} {rest[(i + 1, False)]}"
                body = take if names[i] in required else f"({take}) | {rest[(i + 1, first)]}"
                rest[(i, first)] = self.rule(body)
        return f'("{{" {rest[(0, True)]} "}}")'

    def _ref(self, ref: Any) -> str:
        if not isinstance(ref, str):
            raise GrammarError(f"{self.where}: '$ref' must be a string")
        key = (id(self._root), ref)
        if key in self._refs:
            return self._refs[key]
        target: Any = self._root
        if ref != "#":
            if not ref.startswith("#/"):
                raise GrammarError(f"{self.where}: only local $refs (#/...) are supported, got {ref!r}")
            for part in ref[2:].split("/"):
                if not isinstance(target, dict) or part not in target:
                    raise GrammarError(f"{self.where}: $ref {ref!r} points nowhere")
                target = target[part]
        name = f"r{len(self.rules)}"
        self._refs[key] = name
        self.rules[name] = '""'  # reserved; a recursive schema refers to it while it is built
        self.rules[name] = self.schema(target)
        return name


def schema_grammar(schema: Any, where: str = "schema") -> str:
    """The grammar of exactly the JSON `schema` accepts, in the template's form."""
    builder = GrammarBuilder()
    return builder.text(builder.top(schema, where))


def any_object_grammar() -> str:
    return GrammarBuilder().text("jobject")


THOUGHT = 'TagDispatch(loop_after_dispatch=false, excludes=("</think>"))'
"""Any text without `</think>` (xgrammar's EBNF; vLLM compiles it as it compiles the rest)."""
AFTER_THOUGHT = '"</think>" [ \\n]{0,4}'
"""The end of a thinking block and at most four spaces or newlines before the answer."""


def after_thinking(grammar: str, opened: bool) -> str:
    """`grammar` (as `GrammarBuilder.text` writes it: `root` first) preceded by the model's own
    thinking, as vLLM's server constrains a reasoning model (its grammar starts where the thinking
    ends): an optional `<think>...</think>` block, or, when the prompt `opened` one, the rest of it.
    The thinking is unconstrained text: it can run to `max_tokens`, as it can on vLLM's server."""
    first, _, rules = grammar.partition("\n")
    if not first.startswith("root ::= "):
        raise ValueError("the grammar does not start with its root rule")
    head = f"thought {AFTER_THOUGHT}" if opened else f'("<think>" thought {AFTER_THOUGHT})?'
    return f"root ::= {head} answer\nthought ::= {THOUGHT}\nanswer ::= {first.removeprefix('root ::= ')}\n{rules}"
