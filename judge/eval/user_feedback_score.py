"""How many replies of a labelled set a user-feedback reader reads right:
`python -m judge.eval.user_feedback_score [--data FILE] [--reader FILE] [--show-misses]`.

The data (default judge/eval/user_feedback_heldout.jsonl, written before the reader of
judge/user_feedback.py was, and never used to write its rules) holds one `{"text", "label"}` per
line, `label` `accept` or `correct`. A reply is read right when an acceptance is read as one and a
correction as a correction or a redo request; a reply read as neither (`unread`) counts as wrong.

`--reader FILE` scores another reader module instead: one with `read_reply` (this one's API) or one
with `asks_for_redo`/`corrects`/`accepts` (the reader before issue #43), e.g. the old one with
`git show <commit>:judge/user_feedback.py > /tmp/old_reader.py`. Exit code 2, with one line, for a
data or reader file that cannot be used.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

DEFAULT_DATA = Path(__file__).resolve().parent / "user_feedback_heldout.jsonl"
LABELS = ("accept", "correct")


def load_rows(path: Path) -> list[tuple[str, str]]:
    """(text, label) per line; ValueError naming the line for one that is not usable."""
    rows = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}:{number}: not JSON ({exc.msg})") from None
        if (
            not isinstance(row, dict)
            or not isinstance(row.get("text"), str)
            or row.get("label") not in LABELS
        ):
            raise ValueError(f'{path}:{number}: expected {{"text": str, "label": "accept"|"correct"}}')
        rows.append((row["text"], row["label"]))
    if not rows:
        raise ValueError(f"{path}: no rows")
    return rows


def reader_of(module: ModuleType) -> Callable[[str], str]:
    """`accept`, `correct` or `unread` for a reply, with the module's own API."""
    if hasattr(module, "read_reply"):
        names = {"acceptance": "accept", "correction": "correct", "redo": "correct"}
        return lambda text: names.get(module.read_reply(text).kind, "unread")

    def old(text: str) -> str:
        if module.asks_for_redo(text) or module.corrects(text):
            return "correct"
        return "accept" if module.accepts(text) else "unread"

    return old


def load_reader(path: str | None) -> ModuleType:
    if path is None:
        from judge import user_feedback

        return user_feedback
    spec = importlib.util.spec_from_file_location("scored_reader", path)
    if spec is None or spec.loader is None or not Path(path).is_file():
        raise ValueError(f"{path}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if not hasattr(module, "read_reply") and not all(
        hasattr(module, n) for n in ("asks_for_redo", "corrects", "accepts")
    ):
        raise ValueError(f"{path}: has neither read_reply nor asks_for_redo/corrects/accepts")
    return module


class _OneLineParser(argparse.ArgumentParser):
    def error(self, message: str):  # type: ignore[override]
        self.exit(2, f"{self.prog}: {message}\n")


def main(argv: list[str] | None = None) -> int:
    parser = _OneLineParser(
        prog="python -m judge.eval.user_feedback_score", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--data", default=str(DEFAULT_DATA), help="labelled replies (JSONL)")
    parser.add_argument(
        "--reader", default=None, help="a reader module file (default: judge/user_feedback.py)"
    )
    parser.add_argument("--show-misses", action="store_true", help="print each reply read wrong")
    args = parser.parse_args(argv)
    try:
        rows = load_rows(Path(args.data))
        read = reader_of(load_reader(args.reader))
    except (OSError, ValueError, SyntaxError) as exc:
        print(f"{parser.prog}: {exc}", file=sys.stderr)
        return 2
    got = [(text, label, read(text)) for text, label in rows]
    right = {label: sum(1 for _, lab, r in got if lab == label and r == label) for label in LABELS}
    total = {label: sum(1 for _, lab, _ in got if lab == label) for label in LABELS}
    unread = sum(1 for *_, r in got if r == "unread")
    if args.show_misses:
        for text, label, reading in got:
            if reading != label:
                print(f"{label} read as {reading}: {text}")
    print(
        f"{sum(right.values())}/{len(rows)} read right "
        f"(acceptances {right['accept']}/{total['accept']}, corrections {right['correct']}/{total['correct']}, "
        f"unread {unread})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
