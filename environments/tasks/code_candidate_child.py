"""The solution's side of a code-style suite: run inside the solution's sandbox as
`python3 -I -c <suite_child.py's text, main switched off> + <this file's text>` (see
environments/rollout/verifier_rpc.py), so that it shares the one value encoder (`encode`, `describe`).

It imports nothing of the tests and never sees them. It reads call requests, one JSON line each
(`{"id", "module", "name", "args", "kwargs"}`, arguments in the tagged encoding), from the request
FIFO, calls the solution's function, and writes one JSON line per call to the reply FIFO: the
returned value in the tagged encoding, `unencodable` (with the type's name) for anything that is
not a plain value, or the exception it raised. Nothing here is trusted: the solution may replace
all of it. The trusted parent decodes every reply strictly, so all it can ever pass on is a plain
value or the name of an exception. Only the Python standard library is used.
"""

import contextlib
import importlib
import json
import os
import sys


def serve(spec):
    requests = open(spec["requests"], "rb")  # noqa: SIM115 - open for the life of the process
    replies = open(spec["replies"], "wb", buffering=0)  # noqa: SIM115
    sys.path.insert(0, os.getcwd())
    for line in requests:
        request = json.loads(line)
        try:
            module = importlib.import_module(request["module"])
            function = getattr(module, request["name"])
            args = [decode(a) for a in request["args"]]  # noqa: F821 - suite_child.py's decoder
            kwargs = {k: decode(v) for k, v in request["kwargs"].items()}  # noqa: F821
            value = function(*args, **kwargs)
            try:
                reply = {"value": encode(value)}  # noqa: F821 - suite_child.py's, sent before this file
            except (TypeError, RecursionError):
                reply = {"unencodable": type(value).__name__}
        except BaseException as exc:  # noqa: BLE001 - whatever the solution raised is its answer
            reply = describe(exc)  # noqa: F821
        reply["id"] = request["id"]
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(BaseException):
                stream.flush()
        replies.write((json.dumps(reply) + "\n").encode())


def rpc_main():
    spec = json.loads(sys.stdin.read())
    sink = os.open(spec["output_file"], os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o600)
    os.dup2(sink, 1)
    os.dup2(sink, 2)
    os.close(sink)
    serve(spec)
    os._exit(0)


if __name__ == "__main__":  # (run as `-c`: the prelude sets __name__ back to "__main__")
    rpc_main()
