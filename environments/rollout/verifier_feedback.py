"""What the agent may read about a verification: public tests in detail, hidden tests as a count.

A hidden test's inputs, expected values, failing line or output never appear in the feedback
(which reaches the conversation, the judge, the teacher's hint and the saved messages): an agent
that resubmits could otherwise tabulate the answers. The reward still counts every test.

Which tests are public: those the suite marks (`"public": true` on a data test or a stdio case,
`"public": [names]` in a code suite), plus, when `public_fraction` > 0, a deterministic share of
the others, chosen by a stable hash of (task id, test name) (environments/tasks/split.py), so the
same tests are public on every run and machine. More public tests give the agent more to learn
from, and give away those tests' answers: a solution that hard-codes them passes those tests.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from environments.tasks.split import split_bucket

PUBLIC_SPLIT_SALT = "hermes-opd-public-tests-v1"


@dataclass(frozen=True)
class FeedbackItem:
    name: str
    passed: bool
    message: str
    public: bool


def choose_public(
    task_id: str, names: Iterable[str], marked: frozenset[str], public_fraction: float
) -> frozenset[str]:
    """The marked tests, plus each other test whose bucket falls under `public_fraction`."""
    if not 0.0 <= public_fraction <= 1.0:
        raise ValueError(f"public_fraction must be in [0, 1], got {public_fraction}")
    return frozenset(
        n
        for n in names
        if n in marked or split_bucket(f"{task_id}\x00{n}", PUBLIC_SPLIT_SALT) < public_fraction
    )


def feedback_text(
    items: Sequence[FeedbackItem],
    *,
    missing: Sequence[str],
    timed_out_after_s: float | None,
    max_chars: int,
) -> str:
    """Empty when every test passed. Otherwise the counts, why nothing could run (missing files,
    the time limit), and each failing PUBLIC test with its message; hidden tests only as a count."""
    passed = sum(i.passed for i in items)
    total = len(items)
    if passed == total:
        return ""
    hidden = [i for i in items if not i.public]
    public = [i for i in items if i.public]
    lines = [f"{passed}/{total} tests passed."]
    if hidden:
        lines.append(
            f"Hidden tests: {sum(i.passed for i in hidden)}/{len(hidden)} passed "
            "(their inputs and expected results are not shown)."
        )
    if public:
        lines.append(f"Public tests: {sum(i.passed for i in public)}/{len(public)} passed.")
    if missing:
        lines.append(
            "Missing solution file(s) (not found, not a regular file, a link out of the working directory, "
            "or too large): " + ", ".join(missing)
        )
    if timed_out_after_s is not None:
        lines.append(f"The test run timed out after {timed_out_after_s:g}s.")
    failing = [i for i in public if not i.passed]
    text = "\n".join(lines)
    if not failing:
        return text[:max_chars]
    text += "\nFailing public tests:"
    # Tests that failed for the same reason (e.g. an ImportError) are listed together.
    by_message: dict[str, list[str]] = {}
    for item in failing:
        by_message.setdefault(item.message, []).append(item.name)
    remaining = len(failing)
    for message, group in by_message.items():
        entry = f"\n- {', '.join(group)}" + (f": {message}" if message else "")
        if len(text) + len(entry) > max_chars - 40:
            text += f"\n... and {remaining} more failing public test(s)"
            break
        text += entry
        remaining -= len(group)
    return text[:max_chars]
