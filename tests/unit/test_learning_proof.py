"""The quick learning test's criterion (hermes_opd/learning_study/proof.py), on hand-made runs."""

from __future__ import annotations

import json

from hermes_opd.learning_study.proof import (
    LIVE_MIN_MODULE_GAIN,
    MAX_STATED_START,
    MIN_MODULE_GAIN,
    MIN_STATED_GAIN,
    main,
    run_facts,
    transmission_verdict,
    verdict,
    verdict_line,
)


def evaluation(passed: int, module: int, name: int) -> dict:
    return {
        "eval/pass@1": passed / 24,
        "eval/tasks": 24.0,
        "conventions": {
            "module": {"attempts": 12, "followed": module},
            "name": {"attempts": 12, "followed": name},
        },
    }


def run(end: tuple[int, int, int], gap_end: float = 0.30) -> dict:
    return {
        "arm": "opd",
        "seed": 3,
        "evals": [evaluation(5, 6, 0), evaluation(7, 6, 0), evaluation(*end)],
        "probe": {"teacher_gap_all_start": 0.32, "teacher_gap_all_end": gap_end},
    }


def test_a_run_passes_only_when_the_revealed_conventions_rose_by_the_margin():
    assert MIN_MODULE_GAIN == 2
    facts = run_facts(run((12, 10, 3)))
    assert facts == {
        "arm": "opd",
        "seed": 3,
        "tasks": 24,
        "passed_start": 5,
        "passed_end": 12,
        "followed_start": 6,
        "followed_end": 13,
        "module_start": 6,
        "module_end": 10,
        "name_start": 0,
        "name_end": 3,
        "teacher_gap_fell": True,
    }
    assert verdict(facts) == []
    assert verdict_line(facts).endswith("teacher gap fell: True: PASS")
    # success rose by 3 and the name convention by 2, the module one by 1: what a constant hint produced
    assert verdict(run_facts(run((8, 7, 2), gap_end=0.31))) == [
        "module tasks written to the revealed file rose by 1 (6 -> 7), less than 2"
    ]
    assert verdict(run_facts(run((9, 9, 0)))) == []  # names need not move
    assert verdict(run_facts(run((5, 10, 0)))) == ["held-out success rose by 0 tasks (5 -> 5), less than 1"]
    no_choices = run((12, 10, 3))
    del no_choices["evals"][-1]["conventions"]
    assert verdict(run_facts(no_choices)) == ["the evaluations recorded no convention choices"]


def test_the_command_prints_every_runs_verdict(tmp_path, capsys):
    (tmp_path / "learning.json").write_text(json.dumps({"runs": [run((12, 10, 3)), run((6, 7, 0))]}))
    assert main([str(tmp_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].endswith(": PASS") and lines[1].endswith(
        ": FAIL: module tasks written to the revealed file rose by 1 (6 -> 7), less than 2"
    )
    assert "followed 6->13 (module 6->10, name 0->3)" in lines[0]
    assert main([str(tmp_path / "missing")]) == 2


def test_a_live_bench_directory_is_judged_with_the_live_margin(tmp_path, capsys):
    assert LIVE_MIN_MODULE_GAIN == 1
    # the measured shapes: the user's words moved the module by 1 (passed 5 -> 6); the constant-hint
    # control moved only names (passed 5 -> 8, module 6 -> 6)
    real, control = run((6, 7, 0)), run((8, 6, 3))
    assert verdict(run_facts(real), LIVE_MIN_MODULE_GAIN) == []
    assert verdict(run_facts(control), LIVE_MIN_MODULE_GAIN) == [
        "module tasks written to the revealed file rose by 0 (6 -> 6), less than 1"
    ]
    (tmp_path / "live.json").write_text(json.dumps({"runs": [real, control]}))
    assert main([str(tmp_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].endswith(": PASS") and lines[1].endswith("rose by 0 (6 -> 6), less than 1")


def transmission_run(start: tuple[int, int, int], end: tuple[int, int, int]) -> dict:
    return {"arm": "opd", "seed": 0, "evals": [evaluation(*start), evaluation(*end)], "probe": {}}


def test_transmission_needs_values_the_student_does_not_choose_and_a_rise_by_the_margin(tmp_path, capsys):
    assert MAX_STATED_START == 1
    margin = MIN_STATED_GAIN
    assert transmission_verdict(run_facts(transmission_run((0, 0, 0), (12, 8, margin - 8)))) == []
    short = run_facts(transmission_run((0, 1, 0), (2, 1, margin - 1)))
    assert transmission_verdict(short) == [
        f"held-out attempts following the stated values rose by {margin - 1} (1 -> {margin}: module 1 -> 1, "
        f"name 0 -> {margin - 1}), less than {margin}"
    ]
    # a value the student already chose: amplification, not transmission, whatever the rise
    chosen = transmission_verdict(run_facts(transmission_run((5, 6, 0), (12, 12, 12))))
    assert chosen == [
        "the module value was already chosen in 6 of 12 held-out tasks at the start (more than 1): nothing to transmit"
    ]
    (tmp_path / "learning.json").write_text(
        json.dumps({"runs": [transmission_run((0, 0, 0), (9, 9, margin))]})
    )
    assert main(["--transmission", str(tmp_path)]) == 0
    assert capsys.readouterr().out.strip().endswith(": PASS")
