"""The one rule for a file name the project did not choose: a sample's `{"solution": {name: ...}}`
(model output, scored by `hermes-opd tasks score`), a task source's `solution_files`, a task
directory's index. Pure logic; the writing itself resolves the checked name inside its target
directory without following a link out of it (environments/rollout/verifier_batch.py, through
the same jail as the agent's tools).

A name is accepted when it is a relative POSIX path of at most MAX_PARTS components, each a
non-empty name other than `.` and `..`, of at most MAX_PART_BYTES bytes of UTF-8, without NUL or
any other control character, and its first component is not one of the verifier's own files in
the scratch directory (RESERVED).
"""

from __future__ import annotations

from hermes_opd.contract.errors import HermesOPDError

MAX_PARTS = 16
MAX_PART_BYTES = 255
MAX_NAME_BYTES = 1024
RESERVED = frozenset(
    {
        ".test-output",
        ".tests-output",
        ".stdio-stderr",
        ".hermes-rpc-requests",
        ".hermes-rpc-replies",
        ".hermes-rpc-calls",
        ".hermes-rpc-returns",
    }
)
"""The verifier's own files beside the solution (environments/rollout/verifier*.py)."""


class UnsafeFileName(HermesOPDError, ValueError):
    """A file name that breaks the rule; the message quotes it (shortened) and says why."""


def _shown(name: str) -> str:
    return repr(name if len(name) <= 80 else name[:77] + "...")


def checked_name(name: object) -> str:
    """`name` itself when it follows the rule; UnsafeFileName otherwise."""
    if not isinstance(name, str):
        raise UnsafeFileName(f"a file name must be a string, got {type(name).__name__}")
    shown = _shown(name)
    if not name.strip():
        raise UnsafeFileName(f"file name {shown} is empty")
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in name):
        what = "a NUL byte" if "\x00" in name else "a control character"
        raise UnsafeFileName(f"file name {shown} contains {what}")
    try:
        size = len(name.encode("utf-8"))
    except UnicodeEncodeError:
        raise UnsafeFileName(f"file name {shown} is not valid UTF-8 (a lone surrogate)") from None
    if size > MAX_NAME_BYTES:
        raise UnsafeFileName(f"file name {shown} is {size} bytes long; at most {MAX_NAME_BYTES}")
    if name.startswith("/"):
        raise UnsafeFileName(
            f"file name {shown} is absolute; give a path relative to the solution's directory"
        )
    parts = name.split("/")
    if len(parts) > MAX_PARTS:
        raise UnsafeFileName(f"file name {shown} has {len(parts)} components; at most {MAX_PARTS}")
    for part in parts:
        if part == "..":
            raise UnsafeFileName(
                f"file name {shown} contains '..'; it must stay inside the solution's directory"
            )
        if part in ("", "."):
            raise UnsafeFileName(f"file name {shown} has an empty or '.' component")
        if len(part.encode("utf-8")) > MAX_PART_BYTES:
            raise UnsafeFileName(f"file name {shown} has a component longer than {MAX_PART_BYTES} bytes")
    if parts[0] in RESERVED:
        raise UnsafeFileName(f"file name {shown} is reserved for the verifier's own use")
    return name
