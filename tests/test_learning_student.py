"""The learning test of the README's test command: the real online loop on the copying student.

`hermes-opd bench learning --config configs/bench/learning-student-quick.yaml` with the shipped
student hermes_opd/devkit/student_q2 (built by `hermes-opd dev-model build-student DIR --recipe copy`;
tests/test_student_recipe.py checks that it is today's recipe): its own CPU vLLM with LoRA
hot-loading, atroposlib's run-api, an env `serve` worker on the convention tasks and
`hermes-opd train`, OPD only, 6 steps of 2 groups of 4.

The direction it asserts (docs/notes/learning-lab.md, "The quick test on the copying student"): held-out
success, the env's own greedy `evaluate` on the 24 held-out tasks, rises under OPD. The held-out
tasks' conventions are never in the student's pretraining, and the evaluation sends no hint, so
only what OPD moved from the hinted teacher into the unhinted policy can raise it. The teacher-gap
probe reads the trainer's last synced adapter from vLLM, so the test also fails when weight sync does
not deliver the weights. Not timed.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from hermes_opd.devkit.paths import shipped_student_dir

REPO = Path(__file__).resolve().parent.parent
STUDENT = shipped_student_dir()
START = 5 / 24
"""The student's greedy held-out success before training (measured in every run)."""


@pytest.mark.integration
def test_opd_raises_the_copying_students_held_out_success(tmp_path):
    out = tmp_path / "bench"
    done = subprocess.run(
        [sys.executable, "-m", "hermes_opd.commands.main", "bench", "learning", "--config",
         str(REPO / "configs" / "bench" / "learning-student-quick.yaml"), "--student-model", str(STUDENT),
         "--out", str(out)],
        cwd=REPO, capture_output=True, text=True, timeout=1500, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    last = json.loads(done.stdout.strip().splitlines()[-1])
    record = json.loads((out / "learning.json").read_text())
    (run,) = record["runs"]
    assert run["arm"] == "opd" and len(run["steps"]) == 6
    # one grid for every run: the start, then the weights after steps 2, 4 and 6 (8 generations a step)
    assert [x for x, _ in run["curve"]] == [0, 16, 32, 48]
    assert run["curve"][0][1] == pytest.approx(START)
    # 10 of 10 runs (seeds 0-9) passed 7-13 of the 24 tasks after step 6, from 5 (docs/notes/learning-lab.md);
    # the margin is one task
    assert last["opd_only_gain"] >= 1 / 24 - 1e-9, run["curve"]
    assert last["opd_teacher_gap_fell"] == "1/1"  # 10 of 10 fell, by 0.016-0.057 nats
    for step in run["steps"]:
        # w_grpo = 0: the GRPO term is logged (these groups have mixed scores) but not trained on
        assert step["loss/opd"] > 0 and step["loss/total"] == pytest.approx(step["loss/opd"], rel=1e-4)
