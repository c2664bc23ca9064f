"""The dataset's side of a code-style suite: its test code, run for one test inside a sandbox of
its own (never the solution's), as `python3 -I -c <suite_child.py's text, main switched off> +
<this file's text>` (see environments/rollout/verifier_rpc.py).

The test code is the dataset's, so it is confined like any other code, but the solution cannot
reach it: the solution's functions are remote procedures here. Calling one encodes the arguments
(plain values only: a callback or another candidate is refused with a clear TypeError), writes the
call to the call FIFO, and waits for the trusted parent's answer on the return FIFO: a plain value
(decoded here, so the test's assertions compare plain values the solution could not shape), or the
exception the solution raised, re-raised here as the builtin class of that name (else
`CandidateError`, also for StopIteration, which would end a `map(candidate, ...)` early). `from <module> import f` in the test code gets the same remote procedures.

The verdict (the test ran to its end, or what it raised, and where) is written to the process's
own stdout after RESULT_MARK; the test code's own prints go to a file. Only the standard library.
"""

import builtins
import contextlib
import json
import os
import signal
import sys
import traceback
import types

TEST_RESULT_MARK = "@@hermes-code-test@@ "
TEST_FILENAME = "<hidden tests>"
TEST_STATEMENT = "<hidden test>"


class CandidateError(Exception):
    """The solution raised an exception that is not a builtin one."""


class CandidateUnavailable(Exception):
    """The solution's process gave no answer (it ended, timed out, or replied nonsense)."""


class TestTimeout(BaseException):
    pass


# Raised inside `map(candidate, ...)`, these would end the iteration early instead of failing it.
CONTROL_FLOW = (StopIteration, StopAsyncIteration)


def raised_here(names, message):
    for name in names:
        cls = getattr(builtins, name, None) if isinstance(name, str) else None
        if isinstance(cls, type) and issubclass(cls, CONTROL_FLOW):
            break
        if isinstance(cls, type) and issubclass(cls, Exception):
            try:
                return cls(message)
            except Exception:  # noqa: BLE001 - e.g. UnicodeDecodeError needs five arguments
                break
    return CandidateError(f"{names[0] if names else 'exception'}: {message}")


class Channel:
    def __init__(self, calls_path, returns_path):
        self.calls = open(calls_path, "wb", buffering=0)  # noqa: SIM115 - for the process's life
        self.returns = open(returns_path, "rb")  # noqa: SIM115

    def call(self, module, name, args, kwargs):
        try:
            encoded_args = [encode(a) for a in args]  # noqa: F821 - suite_child.py's encoder
            encoded_kwargs = {k: encode(v) for k, v in kwargs.items()}  # noqa: F821
        except (TypeError, RecursionError) as exc:
            raise TypeError(
                f"{name}() was given a {exc} argument: only plain values (None, bool, int, float, str, "
                "bytes, and lists, tuples, sets and dicts of them) cross to the solution; callbacks and "
                "nested candidates are not supported"
            ) from None
        request = {"module": module, "name": name, "args": encoded_args, "kwargs": encoded_kwargs}
        self.calls.write((json.dumps(request) + "\n").encode())
        line = self.returns.readline()
        reply = json.loads(line) if line else {"error": "no answer"}
        if "value" in reply:
            return decode(reply["value"])  # noqa: F821 - suite_child.py's decoder
        if "raised" in reply:
            raise raised_here(reply["raised"], reply.get("message", ""))
        if "unencodable" in reply:
            raise TypeError(f"{name}() returned a {reply['unencodable']}, which is not a plain value")
        raise CandidateUnavailable(f"{name}(): {reply.get('error', 'no answer')}")


def remote(channel, module, name):
    def call(*args, **kwargs):
        return channel.call(module, name, args, kwargs)

    call.__name__ = call.__qualname__ = name
    return call


def remote_module(channel, module):
    proxy = types.ModuleType(module)

    def attribute(name):
        if name.startswith("__"):
            raise AttributeError(name)
        return remote(channel, module, name)

    proxy.__getattr__ = attribute
    return proxy


def verdict(exc, sources):
    """`Type: message (at: the test's line)`; `sources` maps a file name to its lines."""
    text = type(exc).__name__
    with contextlib.suppress(BaseException):
        if str(exc):
            text += ": " + str(exc)
    for frame in reversed(traceback.extract_tb(exc.__traceback__)):
        lines = sources.get(frame.filename, ())
        if 1 <= (frame.lineno or 0) <= len(lines):
            text += " (at: " + lines[frame.lineno - 1].strip() + ")"
            break
    return text[:500]


def on_alarm(signum, frame):
    raise TestTimeout()


def run_test(spec, channel):
    namespace = {"__name__": "hidden_tests"}
    sources = {TEST_FILENAME: spec["code"].splitlines(), TEST_STATEMENT: spec["test"].splitlines()}
    try:
        exec(compile(spec["context"], "<test context>", "exec"), namespace)
        for module in spec["modules"]:
            sys.modules[module] = remote_module(channel, module)
        for name in spec["remote"]:
            namespace[name] = remote(channel, spec["modules"][0], name)
        exec(compile(spec["code"], TEST_FILENAME, "exec"), namespace)
    except TestTimeout:
        raise
    except BaseException as exc:  # noqa: BLE001
        return {"passed": False, "message": "the tests could not be loaded: " + verdict(exc, sources)}
    try:
        exec(compile(spec["test"], TEST_STATEMENT, "exec"), namespace)
    except TestTimeout:
        raise
    except BaseException as exc:  # noqa: BLE001
        return {"passed": False, "message": verdict(exc, sources)}
    return {"passed": True, "message": ""}


def tests_main():
    spec = json.loads(sys.stdin.read())
    report = os.fdopen(os.dup(1), "w", encoding="utf-8")
    sink = os.open(spec["output_file"], os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o600)
    os.dup2(sink, 1)
    os.dup2(sink, 2)
    os.close(sink)
    channel = Channel(spec["calls"], spec["returns"])
    signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, spec["timeout_s"])
    try:
        result = run_test(spec, channel)
    except TestTimeout:
        result = {"passed": False, "message": f"timed out after {spec['timeout_s']:g}s"}
    signal.setitimer(signal.ITIMER_REAL, 0)
    report.write("\n" + TEST_RESULT_MARK + json.dumps(result) + "\n")
    report.flush()
    os._exit(0)


if __name__ == "__main__":  # (run as `-c`: the prelude sets __name__ back to "__main__")
    tests_main()
