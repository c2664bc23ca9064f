"""The learning test of the README's test command: the real online loop on the copying student.

`hermes-opd bench learning --config hermes_opd/learning_study/configs/learning-student-quick.yaml` with the shipped
student hermes_opd/learning_study/student_q2 (built by `hermes-opd dev-model build-student DIR --recipe copy`;
tests/unit/test_student_recipe.py checks that it is today's recipe): its own CPU vLLM with LoRA
hot-loading, atroposlib's run-api, an env `serve` worker on the convention tasks and
`hermes-opd train`, OPD only, 6 steps of 2 groups of 4.

What it asserts is what only the hint's information produced in the measured runs
(docs/notes/learning-proof.md): on the 12 held-out module tasks, the env's own greedy `evaluate` (no
hint), the attempts that write the file the hints revealed (`helpers.py`) rise by at least
`proof.MIN_MODULE_GAIN` (hermes_opd/learning_study/proof.py), and held-out success rises. The held-out tasks' conventions are
never in the student's pretraining and the evaluation sends no hint, so only what OPD moved from the
hinted teacher into the unhinted policy can raise them; the same runs with a constant hint
(hermes_opd/learning_study/configs/learning-student-quick-constant*.yaml) were measured below the margin. The
teacher-gap probe is a diagnostic: the distance to whatever the teacher was told falls for any hint,
constant or wrong ones too, so it is no evidence that the hint was right; it is asserted because it
reads the trainer's last adapter from vLLM and so fails when weight sync does not deliver the
weights. Not timed.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from hermes_opd.learning_study.paths import CONFIG_DIR, shipped_student_dir
from hermes_opd.learning_study.proof import run_facts, verdict, verdict_line

REPO = Path(__file__).resolve().parents[2]
STUDENT = shipped_student_dir()
START = 5 / 24
"""The student's greedy held-out success before training (measured in every run)."""
MODULE_NAME_START = (6, 0)
"""Held-out attempts that follow the revealed conventions before training: 6 of 12 module tasks write
`helpers.py`, 0 of 12 name tasks define `compute_<noun>` (measured in every run)."""


@pytest.mark.integration
def test_opd_moves_the_revealed_conventions_into_the_unhinted_copying_student(tmp_path):
    out = tmp_path / "bench"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "hermes_opd.commands.main",
            "bench",
            "learning",
            "--config",
            str(CONFIG_DIR / "learning-student-quick.yaml"),
            "--student-model",
            str(STUDENT),
            "--out",
            str(out),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=1500,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    last = json.loads(done.stdout.strip().splitlines()[-1])
    record = json.loads((out / "learning.json").read_text())
    (run,) = record["runs"]
    assert run["arm"] == "opd" and len(run["steps"]) == 6
    # one grid for every run: the start, then the weights after steps 2, 4 and 6 (8 generations a step)
    assert [x for x, _ in run["curve"]] == [0, 16, 32, 48]
    assert run["curve"][0][1] == pytest.approx(START)
    # the criterion every measured run was judged by (docs/notes/learning-proof.md)
    facts = run_facts(run)
    assert verdict(facts) == [], verdict_line(facts)
    assert (facts["module_start"], facts["name_start"]) == MODULE_NAME_START
    # a diagnostic, not evidence for the hint: it falls for any teacher; it fails when sync fails
    assert last["opd_teacher_gap_fell"] == "1/1"
    for step in run["steps"]:
        # w_grpo = 0: the GRPO term is logged (these groups have mixed scores) but not trained on
        assert step["loss/opd"] > 0 and step["loss/total"] == pytest.approx(step["loss/opd"], rel=1e-4)
        assert step["policy/lag_mean"] >= 0
        assert step["time/checkpoint_and_sync_s"] > 0 and step["timings"]["train_s"] > 0
    # what the bench reports around the run (it ran `bench learning --quick` on the dev model before,
    # as its own test; that loop is this one)
    assert list(last)[-4:] == [
        "opd_only_gain",
        "grpo_only_final",
        "hybrid_final",
        "hybrid_generations_over_grpo",
    ]
    assert run["probe"]["teacher_gap_all_positions"] > 0
    assert [e["policy_version"] for e in run["evals"]] == [0, 2, 4, 6]  # the start, then every 2 steps
    assert (out / "learning.png").read_bytes()[:4] == b"\x89PNG"
    assert "opd" in done.stdout.splitlines()[2]  # the summary table's first row
