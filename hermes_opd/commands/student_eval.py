"""`hermes-opd student-eval`: a student's hint-following on the held-out (or train) convention tasks,
with and without the rules judge's hint (the measurement: hermes_opd/learning_study/hint_following.py)."""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path

from environments.tasks.conventions import convention_splits
from hermes_opd.learning_study.hint_following import measure_hint_following


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hermes-opd student-eval",
        description="Hint-following of a student on the held-out convention tasks (see docs/notes/learning-lab.md).",
    )
    parser.add_argument("model", help="model directory (e.g. one written by `dev-model build-student`)")
    parser.add_argument("--samples", type=int, default=4, help="first attempts per task")
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--max-tokens", type=int, default=128, help="new tokens per attempt (a right answer is about 50)"
    )
    parser.add_argument("--split", choices=["heldout", "train"], default="heldout")
    parser.add_argument("--json", default=None, help="also write the attempts and the summary here")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    train, heldout = convention_splits()
    tasks = heldout if args.split == "heldout" else train
    report = asyncio.run(
        measure_hint_following(
            args.model,
            tasks,
            samples=args.samples,
            temperature=args.temperature,
            seed=args.seed,
            max_tokens=args.max_tokens,
        )
    )
    summary = report.summary()
    if args.json:
        Path(args.json).write_text(
            json.dumps({"summary": summary, "attempts": [a.__dict__ for a in report.attempts]}, indent=1)
            + "\n"
        )
    print(json.dumps(summary))
    return 0
