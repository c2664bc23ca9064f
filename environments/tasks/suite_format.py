"""Hidden tests as data: what the solution's process is asked to compute, and what the trusted side
expects. Pure logic (parsing, the value codec, exact comparison); no I/O.

A test suite is a JSON document::

    {"module": "solution", "imports": ["chunk"], "setup": "",
     "tests": [{"name": "test_bad_size", "setup": "", "cpu_s": 2,
                "checks": [{"expr": "chunk([1, 2], 1)", "returns": [[1], [2]]},
                           {"expr": "chunk([1, 2], 0)", "raises": "ValueError"}]}]}

- `expr` is a Python expression and `exec` a statement, evaluated in the solution's process
  (`environments/tasks/suite_child.py`) after `from <module> import <imports>` and the setup code.
  They are the test's INPUTS: what to call, with what. They never contain the answer.
- The expectation stays on the trusted side: `returns` (a value, compared with exact types),
  `returns_sha256` (the digest of a large value's canonical encoding), `raises` (the name of an
  exception class the call must raise, optionally with a check of its message), or nothing for an
  `exec` step (it must not raise). `tol` allows an absolute difference for floats.
- `cpu_s`: the test's CPU budget, rounded up to whole seconds: all the processes of the test
  together (the sandbox's cgroup counts forks; RLIMIT_CPU per process where there is no cgroup).

The message of an expected exception is written by the solution, so a check on it must not be
passable by a message that lists every answer:

- `message_match: {"pattern": "position (\\d+)", "equals": "4"}` (or a list of accepted values):
  the pattern has exactly one capture group; it must match at least once, and EVERY match must
  capture a whole word (not part of a longer word) equal to an accepted value. A message listing
  "position 0 ... position n" therefore fails every such check.
- `message_contains` (a string or a list): one of them must appear in the message as a whole word
  or phrase. Weaker (a message listing every candidate passes); kept for user datasets.

Values cross the process boundary as JSON with tags for what JSON lacks:
`{"$tuple": [...]}`, `{"$set": [...]}`, `{"$frozenset": [...]}`, `{"$dict": [[key, value], ...]}`
(any keys), `{"$float": "nan" | "inf" | "-inf"}`, `{"$bytes": "<hex>"}`. A JSON object without a
tag is a dict with string keys. Types are exact: `1`, `True` and `1.0` are three different values.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from environments.tasks.suite_child import MAX_DEPTH, canonical_json, digest
from environments.tasks.suite_child import encode as encode_value
from hermes_opd.contract.bounded_json import TASK_INPUT, BoundedJSONError, JSONBounds, loads_bounded
from hermes_opd.contract.errors import HermesOPDError

_TAGS = ("$tuple", "$set", "$frozenset", "$dict", "$float", "$bytes")
_NO_VALUE = object()


class MalformedResult(HermesOPDError, ValueError):
    """A document from the solution's process that is not valid tagged JSON of plain values."""


# ---------------------------------------------------------------------------------------------
# The value codec (the same rules as the child's encoder in environments/tasks/suite_child.py).


def decode_value(data: Any, depth: int = 0) -> Any:
    """Tagged JSON (as parsed by `strict_json`) -> plain Python value. Raises MalformedResult."""
    if depth > MAX_DEPTH:
        raise MalformedResult("value nested too deeply")
    kind = type(data)
    if data is None or kind in (bool, int, float, str):
        return data
    if kind is list:
        return [decode_value(v, depth + 1) for v in data]
    if kind is not dict:
        raise MalformedResult(f"unexpected JSON type {kind.__name__}")
    tags = [k for k in data if k.startswith("$")]
    if not tags:
        return {k: decode_value(v, depth + 1) for k, v in data.items()}
    if len(data) != 1 or tags[0] not in _TAGS:
        raise MalformedResult(f"unknown tag in {sorted(data)[:3]}")
    tag, body = tags[0], data[tags[0]]
    if tag == "$float":
        if body not in ("nan", "inf", "-inf"):
            raise MalformedResult(f"bad $float {body!r}")
        return float(body)
    if tag == "$bytes":
        if type(body) is not str:
            raise MalformedResult("bad $bytes")
        try:
            return bytes.fromhex(body)
        except ValueError:
            raise MalformedResult("bad $bytes") from None
    if type(body) is not list:
        raise MalformedResult(f"{tag} needs a list")
    if tag == "$tuple":
        return tuple(decode_value(v, depth + 1) for v in body)
    if len(body) > MAX_MEMBERS and tag in ("$set", "$frozenset", "$dict"):
        raise MalformedResult(f"{tag} with more than {MAX_MEMBERS} members")
    if tag in ("$set", "$frozenset"):
        values = [decode_value(v, depth + 1) for v in body]
        _check_hashes(values, tag)
        result = set(values) if tag == "$set" else frozenset(values)
        one_plain_type = len({type(v) for v in values}) <= 1 and type(values[0] if values else 0) in (
            int,
            str,
            bytes,
        )
        # Members of one of these types are equal only when they are identical: nothing to compare.
        if not one_plain_type and len(result) != len({canonical(v) for v in values}):
            raise MalformedResult(f"{tag} with members Python treats as equal (e.g. 1 and True)")
        return result
    pairs = []
    for pair in body:
        if type(pair) is not list or len(pair) != 2:
            raise MalformedResult("$dict needs [key, value] pairs")
        pairs.append((decode_value(pair[0], depth + 1), decode_value(pair[1], depth + 1)))
    _check_hashes([k for k, _ in pairs], "$dict")
    result = dict(pairs)
    if len(result) != len(pairs):
        raise MalformedResult("$dict with duplicate keys (or keys Python treats as equal)")
    return result


MAX_REPORT_CHARS = 4 * 1024 * 1024
"""A report, call or reply longer than this (bytes of one JSON line) is refused (the sandbox's
output bound is usually far smaller)."""
MAX_MEMBERS = 50_000
"""Members of one decoded set, frozenset or $dict: building one sorts and hashes them all in single
C calls, which hold the interpreter; 50,000 take some tens of milliseconds. A larger value is refused as
malformed (a test that needs one compares its digest, `returns_sha256`)."""
MAX_SAME_HASH = 8
"""Members of one decoded set or dict that may share a hash value. Integer and tuple hashes are
predictable, so a forged report could fill a set with values of one hash, and building it would
cost the square of their number; honest values almost never share hashes."""


def _check_hashes(values: list[Any], what: str) -> None:
    """Refuse members that are unhashable or share a hash too often: what remains builds in time
    linear in their number."""
    try:
        counts = Counter(map(hash, values))
    except TypeError:
        raise MalformedResult(f"{what} with unhashable members") from None
    if counts and max(counts.values()) > MAX_SAME_HASH:
        raise MalformedResult(f"{what} with more than {MAX_SAME_HASH} members that share one hash value")


def canonical(value: Any) -> str:
    """A string that is equal for two values exactly when they are equal with exact types."""
    return canonical_json(encode_value(value))


def sha256_of(value: Any) -> str:
    """The child's `digest` of the same value: one encoder serves both sides of the boundary."""
    return digest(value)


SANDBOX_JSON = JSONBounds(max_bytes=MAX_REPORT_CHARS, max_depth=MAX_DEPTH + 8, max_elements=100_000)
"""Every JSON document that comes out of a sandbox (a data-style report, a code-suite call, reply
or verdict): refused before it is decoded when it holds more than 100,000 values or nests deeper
than the value codec (plus the report's own wrapping), so that decoding, checking and encoding it
again costs at most a fraction of a second, in a worker thread
(environments/rollout/sandbox_output.py)."""


def strict_json(text: str | bytes) -> Any:
    """Untrusted JSON within SANDBOX_JSON: no NaN/Infinity, duplicate keys, deep nesting or
    excess size; MalformedResult on error."""
    try:
        return loads_bounded(text, SANDBOX_JSON)
    except BoundedJSONError as exc:
        raise MalformedResult(str(exc)) from None


# ---------------------------------------------------------------------------------------------
# Exact comparison.


def same(expected: Any, actual: Any, tol: float | None = None) -> bool:
    """Equal with exact types, recursively (`1 != True != 1.0`; a tuple is not a list). With
    `tol`, floats may differ by at most `tol`; NaN equals NaN."""
    if type(expected) is not type(actual):
        return False
    if type(expected) is float:
        if math.isnan(expected) or math.isnan(actual):
            return math.isnan(expected) and math.isnan(actual)
        if tol is not None and not math.isinf(expected):
            return abs(expected - actual) <= tol
        return expected == actual
    if type(expected) in (list, tuple):
        return len(expected) == len(actual) and all(
            same(e, a, tol) for e, a in zip(expected, actual, strict=True)
        )
    if type(expected) is dict:
        if len(expected) != len(actual):
            return False
        keyed = {canonical(k): v for k, v in actual.items()}
        for key, value in expected.items():
            ck = canonical(key)
            if ck not in keyed or not same(value, keyed[ck], tol):
                return False
        return True
    if type(expected) in (set, frozenset):
        return sorted(map(canonical, expected)) == sorted(map(canonical, actual))
    return expected == actual


# ---------------------------------------------------------------------------------------------
# The suite.


@dataclass(frozen=True)
class Check:
    kind: str
    """"expr" (its value is compared) or "exec" (must not raise)."""
    source: str
    returns: Any = _NO_VALUE
    returns_sha256: str | None = None
    raises: str | None = None
    message_contains: tuple[str, ...] | None = None
    """The exception's message must contain one of these, as a whole word or phrase."""
    message_pattern: str | None = None
    """A regular expression with one capture group; every match must capture an accepted value."""
    message_equals: tuple[str, ...] | None = None
    """The values `message_pattern`'s capture may take."""
    tol: float | None = None

    @property
    def expects_value(self) -> bool:
        return self.returns is not _NO_VALUE

    def outcome_key(self) -> str:
        """What the check expects, as one string (to tell checks with different answers apart)."""
        if self.raises is not None:
            return f"raises:{self.raises}:{self.message_contains or ()}:{self.message_pattern}:{self.message_equals}"
        if self.returns_sha256 is not None:
            return f"sha256:{self.returns_sha256}"
        if self.expects_value:
            return f"value:{canonical(self.returns)}"
        return "ok"


@dataclass(frozen=True)
class DataTest:
    name: str
    checks: tuple[Check, ...]
    setup: str = ""
    cpu_s: float | None = None
    public: bool = False
    """The agent may be told this test's inputs and expected answer (environments/rollout/verifier_feedback.py)."""


@dataclass(frozen=True)
class TestSuite:
    tests: tuple[DataTest, ...]
    module: str = "solution"
    imports: tuple[str, ...] = ()
    setup: str = ""

    @property
    def names(self) -> list[str]:
        return [t.name for t in self.tests]

    def child_spec(self, indices: list[int]) -> dict[str, Any]:
        """What the solution's process receives for a batch of tests: inputs only, never
        expectations."""
        return {
            "module": self.module,
            "imports": list(self.imports),
            "tests": [
                {
                    "index": i,
                    "setup": [self.setup, self.tests[i].setup],
                    "checks": [
                        {"kind": c.kind, "source": c.source, "digest": c.returns_sha256 is not None}
                        for c in self.tests[i].checks
                    ],
                }
                for i in indices
            ],
        }

    def batches(self) -> list[list[int]]:
        """Tests that share a process: all without a CPU budget together (in order), and each test
        with `cpu_s` in a process of its own (RLIMIT_CPU is per process)."""
        plain = [i for i, t in enumerate(self.tests) if t.cpu_s is None]
        timed = [[i] for i, t in enumerate(self.tests) if t.cpu_s is not None]
        return ([plain] if plain else []) + timed


_CHECK_KEYS = {
    "expr",
    "exec",
    "returns",
    "returns_sha256",
    "raises",
    "message_contains",
    "message_match",
    "tol",
}
_TEST_KEYS = {"name", "checks", "setup", "cpu_s", "public"}
_SUITE_KEYS = {"module", "imports", "setup", "tests", "format"}


def is_data_suite(value: Any) -> bool:
    """Does a dataset's hidden_tests value look like a data suite (an object with "tests")?"""
    if isinstance(value, str):
        text = value.strip()
        if not text.startswith("{"):
            return False
        try:
            value = loads_bounded(text, TASK_INPUT)
        except ValueError:
            return False
    return isinstance(value, Mapping) and "tests" in value


def _compiles(source: str, mode: str, where: str) -> None:
    try:
        compile(source, where, mode, dont_inherit=True)
    except (SyntaxError, ValueError) as exc:
        raise ValueError(f"{where}: does not compile: {exc}") from None


def parse_suite(document: Any) -> TestSuite:
    """Validate a data suite (a mapping, or its JSON text); ValueError says where and why."""
    if isinstance(document, str):
        document = loads_bounded(document, TASK_INPUT)
    if not isinstance(document, Mapping):
        raise ValueError(f"a data test suite must be an object, got {type(document).__name__}")
    unknown = set(document) - _SUITE_KEYS
    if unknown:
        raise ValueError(f"test suite: unknown keys {sorted(unknown)}")
    module = document.get("module", "solution")
    if not isinstance(module, str) or not module.isidentifier():
        raise ValueError(f"test suite: module must be a module name, got {module!r}")
    imports = document.get("imports", [])
    if not isinstance(imports, list) or not all(isinstance(n, str) and n.isidentifier() for n in imports):
        raise ValueError("test suite: imports must be a list of names")
    setup = document.get("setup", "")
    if not isinstance(setup, str):
        raise ValueError("test suite: setup must be a string")
    _compiles(setup, "exec", "suite setup")
    raw_tests = document.get("tests")
    if not isinstance(raw_tests, list) or not raw_tests:
        raise ValueError("test suite: tests must be a non-empty list")
    tests: list[DataTest] = []
    seen: set[str] = set()
    for i, raw in enumerate(raw_tests):
        where = f"tests[{i}]"
        if not isinstance(raw, Mapping):
            raise ValueError(f"{where}: must be an object")
        unknown = set(raw) - _TEST_KEYS
        if unknown:
            raise ValueError(f"{where}: unknown keys {sorted(unknown)}")
        name = raw.get("name")
        if not isinstance(name, str) or not name:
            raise ValueError(f"{where}: name must be a non-empty string")
        if name in seen:
            raise ValueError(f"{where}: duplicate test name {name!r}")
        seen.add(name)
        where = f"test {name!r}"
        test_setup = raw.get("setup", "")
        if not isinstance(test_setup, str):
            raise ValueError(f"{where}: setup must be a string")
        _compiles(test_setup, "exec", f"{where} setup")
        cpu_s = raw.get("cpu_s")
        if cpu_s is not None and (type(cpu_s) not in (int, float) or cpu_s <= 0):
            raise ValueError(f"{where}: cpu_s must be a positive number")
        raw_checks = raw.get("checks")
        if not isinstance(raw_checks, list) or not raw_checks:
            raise ValueError(f"{where}: checks must be a non-empty list")
        checks = tuple(_parse_check(c, f"{where} check {j}") for j, c in enumerate(raw_checks))
        public = raw.get("public", False)
        if type(public) is not bool:
            raise ValueError(f"{where}: public must be true or false")
        tests.append(DataTest(name=name, checks=checks, setup=test_setup, cpu_s=cpu_s, public=public))
    return TestSuite(tests=tuple(tests), module=module, imports=tuple(imports), setup=setup)


def _parse_check(raw: Any, where: str) -> Check:
    if not isinstance(raw, Mapping):
        raise ValueError(f"{where}: must be an object")
    unknown = set(raw) - _CHECK_KEYS
    if unknown:
        raise ValueError(f"{where}: unknown keys {sorted(unknown)}")
    if ("expr" in raw) == ("exec" in raw):
        raise ValueError(f"{where}: needs exactly one of expr or exec")
    kind = "expr" if "expr" in raw else "exec"
    source = raw[kind]
    if not isinstance(source, str) or not source.strip():
        raise ValueError(f"{where}: {kind} must be a non-empty string")
    _compiles(source, "eval" if kind == "expr" else "exec", where)
    expectations = [k for k in ("returns", "returns_sha256", "raises") if k in raw]
    if kind == "exec" and expectations:
        raise ValueError(f"{where}: an exec step expects nothing (it must not raise)")
    if kind == "expr" and len(expectations) != 1:
        raise ValueError(f"{where}: needs exactly one of returns, returns_sha256, raises")
    fields: dict[str, Any] = {}
    if "returns" in raw:
        try:
            fields["returns"] = decode_value(raw["returns"])
        except MalformedResult as exc:
            raise ValueError(f"{where}: returns: {exc}") from None
    if "returns_sha256" in raw:
        digest = raw["returns_sha256"]
        if not (
            isinstance(digest, str) and len(digest) == 64 and all(c in "0123456789abcdef" for c in digest)
        ):
            raise ValueError(f"{where}: returns_sha256 must be 64 lowercase hex digits")
        fields["returns_sha256"] = digest
    if "raises" in raw:
        if not isinstance(raw["raises"], str) or not raw["raises"].isidentifier():
            raise ValueError(f"{where}: raises must be an exception class name")
        fields["raises"] = raw["raises"]
    if "message_contains" in raw:
        wanted = raw["message_contains"]
        wanted = [wanted] if isinstance(wanted, str) else wanted
        if "raises" not in raw or not (
            isinstance(wanted, list) and wanted and all(isinstance(w, str) and w for w in wanted)
        ):
            raise ValueError(
                f"{where}: message_contains needs raises and must be a string or a list of strings"
            )
        fields["message_contains"] = tuple(wanted)
    if "message_match" in raw:
        fields["message_pattern"], fields["message_equals"] = _parse_message_match(raw, where)
    if "tol" in raw:
        if type(raw["tol"]) not in (int, float) or raw["tol"] < 0:
            raise ValueError(f"{where}: tol must be a non-negative number")
        fields["tol"] = float(raw["tol"])
    return Check(kind=kind, source=source, **fields)


def _parse_message_match(raw: Mapping[str, Any], where: str) -> tuple[str, tuple[str, ...]]:
    spec = raw["message_match"]
    if "raises" not in raw:
        raise ValueError(f"{where}: message_match needs raises")
    if not isinstance(spec, Mapping) or set(spec) != {"pattern", "equals"}:
        raise ValueError(f'{where}: message_match must be {{"pattern": ..., "equals": ...}}')
    pattern, equals = spec["pattern"], spec["equals"]
    equals = [equals] if isinstance(equals, str) else equals
    try:
        groups = re.compile(pattern).groups if isinstance(pattern, str) else -1
    except re.error as exc:
        raise ValueError(f"{where}: message_match pattern does not compile: {exc}") from None
    if groups != 1:
        raise ValueError(f"{where}: message_match pattern must have exactly one capture group")
    if not (isinstance(equals, list) and equals and all(isinstance(e, str) and e for e in equals)):
        raise ValueError(f"{where}: message_match equals must be a string or a list of strings")
    return pattern, tuple(equals)


# ---------------------------------------------------------------------------------------------
# Judging one test from the child's report.

_MESSAGE_CHARS = 2000
"""Only this much of a claimed exception message is searched (the child sends at most 500)."""


def _is_word_char(text: str, index: int) -> bool:
    return 0 <= index < len(text) and (text[index].isalnum() or text[index] == "_")


def message_matches(message: str, pattern: str, accepted: tuple[str, ...]) -> bool:
    """At least one match, and every match of `pattern` in `message` captures, as a whole word, one
    of `accepted`."""
    message = message[:_MESSAGE_CHARS]
    found = False
    for match in re.finditer(pattern, message):
        start, end = match.span(1)
        if start < 0 or match.group(1) not in accepted:
            return False
        if _is_word_char(message, start - 1) or _is_word_char(message, end):
            return False
        found = True
    return found


def message_contains_word(message: str, wanted: str) -> bool:
    """`wanted` appears in `message` with no word character directly before or after it."""
    return re.search(rf"(?<!\w){re.escape(wanted)}(?!\w)", message[:_MESSAGE_CHARS]) is not None


def judge_test(test: DataTest, report: Any, *, show_source: bool = True) -> tuple[bool, str]:
    """(passed, message) for one test, from the child's parsed report (see suite_child.py).
    The report is only a claim: every check is compared here, against expectations the child
    never saw."""
    if not isinstance(report, dict):
        return False, "no result"
    if isinstance(report.get("error"), str):
        return False, report["error"][:500]
    results = report.get("checks")
    if not isinstance(results, list) or len(results) != len(test.checks):
        return False, "malformed result"
    for i, (check, result) in enumerate(zip(test.checks, results, strict=True)):
        ok, why = _judge_check(check, result)
        if not ok:
            where = f"check {i + 1}"
            if show_source:
                where += f" (`{check.source[:200]}`)"
            elif not why.startswith("raised "):
                why = "wrong result"  # neither the inputs nor the expected answer are revealed
            return False, f"{where}: {why}"[:500]
    return True, ""


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 120 else text[:117] + "..."


def _judge_check(check: Check, result: Any) -> tuple[bool, str]:
    if not isinstance(result, dict):
        return False, "malformed result"
    raised = result.get("raised")
    if raised is not None:
        names = raised if isinstance(raised, list) else []
        message = result.get("message") if isinstance(result.get("message"), str) else ""
        label = (names[0] if names and isinstance(names[0], str) else "exception") + (
            f": {message[:200]}" if message else ""
        )
        if check.raises is None:
            return False, f"raised {label}"
        if check.raises not in names:
            return False, f"expected {check.raises}, raised {label}"
        if check.message_contains is not None and not any(
            message_contains_word(message, w) for w in check.message_contains
        ):
            wanted = " or ".join(map(repr, check.message_contains))
            return False, f"expected {check.raises} mentioning {wanted}, got {label}"
        if check.message_pattern is not None and not message_matches(
            message, check.message_pattern, check.message_equals or ()
        ):
            return False, f"expected {check.raises} with a message that states the right value, got {label}"
        return True, ""
    if check.raises is not None:
        return False, f"expected {check.raises} to be raised"
    if check.kind == "exec":
        return (result.get("ok") is True), "malformed result"
    if "unencodable" in result:
        return False, f"returned a {str(result['unencodable'])[:80]}, which is not a plain value"
    if check.returns_sha256 is not None:
        # The child sends the digest of its value's canonical encoding: only the right value has it.
        return (result.get("sha256") == check.returns_sha256), "wrong result"
    if "value" not in result:
        return False, "malformed result"
    try:
        actual = decode_value(result["value"])
    except MalformedResult as exc:
        return False, f"malformed result: {exc}"
    if same(check.returns, actual, check.tol):
        return True, ""
    return False, f"expected {_short(check.returns)}, got {_short(actual)}"
