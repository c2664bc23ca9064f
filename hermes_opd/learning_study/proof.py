"""The learning tests' verdicts on one run, as pure logic, so that the same criterion judges a README
test and every measured run, real hints and controls: the transmission criterion the learning test
asserts (tests/experiments/test_learning_student.py and, through the proxy,
tests/experiments/test_live_bench.py; below), and the amplification criterion that
docs/notes/learning-proof.md measured and that reads a live bench's runs (no test asserts it:
`LIVE_MIN_MODULE_GAIN`).

A rise in held-out success alone does not show that the hint's information moved the student: a
constant, uninformative hint ("Check your work carefully.", judge_backend: constant) raised it too in
some runs. The criterion is therefore the revealed convention's own rate: of the 12 held-out module
tasks, how many attempts wrote the file the hints revealed (`helpers.py`;
environments/tasks/convention_choice.py), after the last step against the start. It is the module
convention because that is the one that moves in these runs, and `helpers.py` was already the
student's favourite (6 of 12 before training): the criterion shows amplification, not that a
hint's content reached the student (docs/recipes/learning-bench.md, "Amplified or taught"); the name convention
(`compute_<noun>`) moved by 0-4 of 12 under real hints and by up to 2 under constant ones, so it is
reported (`followed`, per kind) but not asserted. `MIN_MODULE_GAIN` was chosen from the measured
distributions of runs with the rules judge's hints and with constant hints (docs/notes/
learning-proof.md, where both are listed run by run).

The transmission test (`transmission_verdict`, `--transmission`) is the criterion of the README's
learning tests, in the env and through the proxy: the convention set to values the student does not choose (`utils.py`,
`compute_<noun>`; learning-student-quick-transmission.yaml), so only a hint's content can raise them,
and the held-out attempts that follow them must rise by `MIN_STATED_GAIN`, a margin that every
measured run with the rules judge's hints met and no control run did.

`python -m hermes_opd.learning_study.proof [--transmission] DIR...` prints the verdict of every run in the bench
output directories given (`learning.json`, or a live bench's `live.json` with its margin, or, before
either is written, the finished runs' `<arm>-seed<N>/run.json`); a path may also name the JSON file.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from hermes_opd.learning_study.report import CONVENTION_KINDS

MIN_MODULE_GAIN = 2
"""Held-out module tasks (of 12) whose attempt writes `helpers.py` after the last step, more than at
the start: the test's margin (docs/notes/learning-proof.md, "The margin")."""
MIN_SUCCESS_GAIN = 1
"""Held-out tasks passed after the last step, more than at the start."""
MAX_STATED_START = 1
"""The transmission test's precondition: each stated value is chosen in at most this many of its 12
held-out tasks before training (the student does not choose it)."""
MIN_STATED_GAIN = 8
"""The transmission test's margin: held-out attempts (of 24) that follow the stated values, module and
name together, after the last step, more than at the start. At 8 steps (the README test's run) the
rules judge's hints raised them by 9-22 in 16 of 16 measured runs (seeds 0-15); no run of the
controls (a constant sentence, the hints with their values taken out, the OPD sign flipped; 6 seeds
each) rose by more than 3 at any evaluation (docs/recipes/learning-bench.md, "Amplified or taught").
Through the proxy (the live test's 96 user turns, student_q2c) the user's words raised them by 13-22
in 10 of 10 measured runs, and no control run by more than 0 (docs/recipes/live-bench.md, "The
transmission test through the proxy")."""
LIVE_MIN_MODULE_GAIN = 1
"""The same criterion's margin for a `hermes-opd bench live` directory: there a reply reveals one
convention and only the wrong-file replies reveal the module. It is a reading, not a test of
learning: on 2026-12-04 it held in 10 of 10 quick runs with the user's words and in 0 of 6 under the
constant-hint control, but on 2026-12-06 in 11 of 11 and in 4 of 7 of the control, so the live
quick test no longer asserts it (docs/recipes/live-bench.md, "The former quick test's criterion
(amplification)"); it asserts `transmission_verdict`."""


def followed(evaluation: dict[str, Any]) -> int | None:
    """Attempts of one evaluation that followed the revealed convention, both kinds together; None
    when the evaluation recorded no choices."""
    rows = evaluation.get("conventions") or {}
    if not all(kind in rows for kind in CONVENTION_KINDS):
        return None
    return sum(int(rows[kind]["followed"]) for kind in CONVENTION_KINDS)


def run_facts(run: dict[str, Any]) -> dict[str, Any]:
    """What the verdict reads from one run of learning.json: success and followed counts at the start
    and the end (of the held-out tasks), per kind too, and the teacher-gap diagnostic."""
    start, end = run["evals"][0], run["evals"][-1]
    tasks = int(end.get("eval/tasks", 24))
    facts: dict[str, Any] = {
        "arm": run["arm"],
        "seed": run["seed"],
        "tasks": tasks,
        "passed_start": round(float(start["eval/pass@1"]) * tasks),
        "passed_end": round(float(end["eval/pass@1"]) * tasks),
        "followed_start": followed(start),
        "followed_end": followed(end),
    }
    for kind in CONVENTION_KINDS:
        for name, evaluation in (("start", start), ("end", end)):
            row = (evaluation.get("conventions") or {}).get(kind)
            facts[f"{kind}_{name}"] = int(row["followed"]) if row else None
    probe = run.get("probe") or {}
    gap_start, gap_end = probe.get("teacher_gap_all_start"), probe.get("teacher_gap_all_end")
    facts["teacher_gap_fell"] = None if gap_start is None or gap_end is None else gap_end < gap_start
    return facts


def verdict(facts: dict[str, Any], min_module_gain: int = MIN_MODULE_GAIN) -> list[str]:
    """The reasons the quick test fails on this run; empty when it passes."""
    reasons = []
    if facts["followed_start"] is None or facts["followed_end"] is None:
        return ["the evaluations recorded no convention choices"]
    gain = facts["module_end"] - facts["module_start"]
    if gain < min_module_gain:
        reasons.append(
            f"module tasks written to the revealed file rose by {gain} "
            f"({facts['module_start']} -> {facts['module_end']}), less than {min_module_gain}"
        )
    success_gain = facts["passed_end"] - facts["passed_start"]
    if success_gain < MIN_SUCCESS_GAIN:
        reasons.append(
            f"held-out success rose by {success_gain} tasks ({facts['passed_start']} -> "
            f"{facts['passed_end']}), less than {MIN_SUCCESS_GAIN}"
        )
    return reasons


def transmission_verdict(facts: dict[str, Any], min_gain: int = MIN_STATED_GAIN) -> list[str]:
    """The reasons the transmission test fails on this run; empty when it passes. The convention was
    set to values the student does not choose (each at most `MAX_STATED_START` of 12 at the start),
    and the held-out attempts that follow them, both kinds together, must rise by `min_gain`."""
    if facts["followed_start"] is None or facts["followed_end"] is None:
        return ["the evaluations recorded no convention choices"]
    reasons = [
        f"the {kind} value was already chosen in {facts[f'{kind}_start']} of 12 held-out tasks at the "
        f"start (more than {MAX_STATED_START}): nothing to transmit"
        for kind in CONVENTION_KINDS
        if facts[f"{kind}_start"] > MAX_STATED_START
    ]
    gain = facts["followed_end"] - facts["followed_start"]
    if gain < min_gain:
        reasons.append(
            f"held-out attempts following the stated values rose by {gain} ({facts['followed_start']} -> "
            f"{facts['followed_end']}: module {facts['module_start']} -> {facts['module_end']}, name "
            f"{facts['name_start']} -> {facts['name_end']}), less than {min_gain}"
        )
    return reasons


def verdict_line(
    facts: dict[str, Any], min_module_gain: int = MIN_MODULE_GAIN, *, transmission: bool = False
) -> str:
    reasons = transmission_verdict(facts) if transmission else verdict(facts, min_module_gain)
    return (
        f"{facts['arm']} seed {facts['seed']}: passed {facts['passed_start']}->{facts['passed_end']}, "
        f"followed {facts['followed_start']}->{facts['followed_end']} (module {facts['module_start']}->"
        f"{facts['module_end']}, name {facts['name_start']}->{facts['name_end']}), teacher gap fell: "
        f"{facts['teacher_gap_fell']}: " + ("PASS" if not reasons else "FAIL: " + "; ".join(reasons))
    )


def load_runs(path: Path) -> tuple[list[dict[str, Any]], bool]:
    """The runs to judge at `path` and whether they are a live bench's: a bench's `learning.json` or a
    live bench's `live.json` (the file, or a directory holding one), else the runs of the directory that
    have finished so far (`<arm>-seed<N>/run.json`, which both benches write before their summary)."""
    if path.is_file():
        record = json.loads(path.read_text())
        return record["runs"], path.name == "live.json" or "rounds" in (record["runs"] or [{}])[0]
    for name, live in (("learning.json", False), ("live.json", True)):
        if (path / name).is_file():
            return json.loads((path / name).read_text())["runs"], live
    runs, live = [], False
    for run_path in sorted(path.glob("*-seed*/run.json")):
        run = json.loads(run_path.read_text())
        if "rounds" in run:  # a live run: its evaluations begin with the start
            live = True
        else:  # a bench run: the start evaluation is kept apart
            run = {**run, "evals": [run["start_eval"], *run["evals"]]}
        runs.append(run)
    if not runs:
        raise OSError(f"no learning.json, live.json or finished run (<arm>-seed<N>/run.json) in {path}")
    return runs, live


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    transmission = "--transmission" in args
    paths = [Path(a) for a in args if a != "--transmission"]
    if not paths:
        print(
            "usage: python -m hermes_opd.learning_study.proof [--transmission] BENCH_OUT_DIR_OR_JSON...",
            file=sys.stderr,
        )
        return 2
    for path in paths:
        try:
            runs, live = load_runs(path)
        except (OSError, ValueError, KeyError) as exc:
            print(f"error: {path}: {exc}", file=sys.stderr)
            return 2
        margin = LIVE_MIN_MODULE_GAIN if live else MIN_MODULE_GAIN
        for run in runs:
            print(f"{path}: {verdict_line(run_facts(run), margin, transmission=transmission)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
