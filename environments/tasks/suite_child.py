"""The solution's side of data-style hidden tests: run as `python3 -I -c <this file's text>` inside
the verification sandbox (see environments/rollout/verifier.py), for a batch of tests.

It reads the tests' inputs from stdin (module, imports, setup code, and the expressions and
statements to evaluate; never the expected answers), imports the solution, evaluates each check,
and writes one line per test: RESULT_MARK followed by a JSON report of what each check returned
or raised. A per-test SIGALRM keeps an endless test from taking the batch's time (best effort:
the wall-clock limit of the whole process is the parent's).

Nothing here is trusted. The solution runs in this interpreter and may replace anything in it,
this code included. The report is only a claim about values; the trusted parent compares it
against expectations this process never receives. Only the Python standard library is used.
"""

import contextlib
import hashlib
import json
import math
import os
import signal
import sys

RESULT_MARK = "@@hermes-check-result@@ "
MAX_DEPTH = 200


def encode(value, depth=0):
    if depth > MAX_DEPTH:
        raise TypeError("value nested too deeply")
    kind = type(value)
    if value is None or kind in (bool, int, str):
        return value
    if kind is float:
        if math.isnan(value):
            return {"$float": "nan"}
        if math.isinf(value):
            return {"$float": "inf" if value > 0 else "-inf"}
        return value
    if kind is list:
        return [encode(v, depth + 1) for v in value]
    if kind is tuple:
        return {"$tuple": [encode(v, depth + 1) for v in value]}
    if kind in (set, frozenset):
        items = [encode(v, depth + 1) for v in value]
        # canonical_json of a plain int is its str(): the same order, without a json.dumps per member.
        items.sort(key=str if all(type(i) is int for i in items) else canonical_json)
        return {"$set" if kind is set else "$frozenset": items}
    if kind is dict:
        if all(type(k) is str and not k.startswith("$") for k in value):
            return {k: encode(v, depth + 1) for k, v in value.items()}
        return {"$dict": [[encode(k, depth + 1), encode(v, depth + 1)] for k, v in value.items()]}
    if kind is bytes:
        return {"$bytes": value.hex()}
    raise TypeError(kind.__name__)


def decode(data):
    """Tagged JSON -> value: the inverse of `encode`, for the code-suite children
    (environments/rollout/verifier_rpc.py), which only receive what the trusted parent encoded."""
    if type(data) is list:
        return [decode(v) for v in data]
    if type(data) is not dict:
        return data
    if len(data) == 1:
        tag, body = next(iter(data.items()))
        if tag == "$float":
            return float(body)
        if tag == "$bytes":
            return bytes.fromhex(body)
        if tag == "$tuple":
            return tuple(decode(v) for v in body)
        if tag == "$set":
            return {decode(v) for v in body}
        if tag == "$frozenset":
            return frozenset(decode(v) for v in body)
        if tag == "$dict":
            return {decode(k): decode(v) for k, v in body}
    return {k: decode(v) for k, v in data.items()}


def canonical_json(data):
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def digest(value):
    """sha256 of the canonical encoding: for large results, so that only 64 hex digits travel."""
    return hashlib.sha256(canonical_json(encode(value)).encode()).hexdigest()


def describe(exc):
    names = []
    for cls in type(exc).__mro__:
        names.append(getattr(cls, "__name__", "?"))
    try:
        message = str(exc)[:500]
    except BaseException:
        message = ""
    return {"raised": names, "message": message}


class TestTimeout(BaseException):
    pass


def on_alarm(signum, frame):
    raise TestTimeout()


def run_test(spec, test):
    """The report of one test: what each check returned or raised, or why none ran."""
    namespace = {"__name__": "hidden_test"}
    try:
        if spec["imports"]:
            exec(f"from {spec['module']} import {', '.join(spec['imports'])}", namespace)
        else:
            exec(f"import {spec['module']}", namespace)
        for source in test["setup"]:
            exec(compile(source, "<setup>", "exec"), namespace)
    except TestTimeout:
        raise
    except BaseException as exc:
        info = describe(exc)
        return {"error": f"could not load the solution: {info['raised'][0]}: {info['message']}"}
    results = []
    for check in test["checks"]:
        try:
            if check["kind"] == "expr":
                value = eval(compile(check["source"], "<check>", "eval"), namespace)
                try:
                    if check.get("digest"):
                        results.append({"sha256": digest(value)})
                    else:
                        results.append({"value": encode(value)})
                except (TypeError, RecursionError):
                    results.append({"unencodable": type(value).__name__})
            else:
                exec(compile(check["source"], "<check>", "exec"), namespace)
                results.append({"ok": True})
        except TestTimeout:
            raise
        except BaseException as exc:
            results.append(describe(exc))
    return {"checks": results}


def main():
    spec = json.loads(sys.stdin.read())
    channel = os.fdopen(os.dup(1), "w", encoding="utf-8")
    sink = os.open(spec["output_file"], os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o600)
    os.dup2(sink, 1)
    os.dup2(sink, 2)
    os.close(sink)
    sys.path.insert(0, os.getcwd())
    signal.signal(signal.SIGALRM, on_alarm)
    per_test = spec["per_test_timeout_s"]
    for test in spec["tests"]:
        try:
            signal.setitimer(signal.ITIMER_REAL, per_test)
            try:
                report = run_test(spec, test)
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
        except TestTimeout:
            report = {"error": f"timed out after {per_test:g}s"}
        report["test"] = test["index"]
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(BaseException):
                stream.flush()
        try:
            line = json.dumps(report)
        except (TypeError, ValueError, RecursionError):
            line = json.dumps({"test": test["index"], "error": "the result could not be encoded"})
        channel.write("\n" + RESULT_MARK + line + "\n")
        channel.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
