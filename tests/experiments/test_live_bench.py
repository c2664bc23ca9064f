"""The live learning test of the README's test command: a simulated user (the official `openai`
client) talks through a real `hermes-opd proxy` to a student the proxy trains from those
conversations, with a real CPU vLLM (LoRA hot-loading), atroposlib's `run-api` and `hermes-opd train`
(docs/recipes/live-bench.md).

`hermes-opd bench live --quick --config hermes_opd/learning_study/configs/live-quick-transmission.yaml`:
OPD only, one seed, 12 rounds of 8 user turns. The team's convention is set to values the student
does not choose (`utils.py`, `compute_<noun>`: 0 of 12 held-out tasks each), and only the user's
replies say what they are; the rules judge passes the user's own words on as the hint. The student is
the shipped student_q2c (student_q2 continued on a person's corrections, STUDENT_Q2.md; the
unchanged student_q2 is not taught through the proxy, docs/recipes/learning-bench.md).

What it asserts:
- transmission (`proof.transmission_verdict`): in the env's greedy, unhinted `evaluate` of the 24
  held-out tasks, the attempts that follow the stated values rise by `proof.MIN_STATED_GAIN` (8), a
  margin every measured run with the user's words met and no run of the controls (one constant
  sentence, the same words with their values removed, the OPD sign flipped) did
  (docs/recipes/live-bench.md, "The transmission test through the proxy");
- the plumbing: every user turn became exactly one trained sample, sampled by the adapter of the
  step before (lag 0) and delivered once; the trainer trained the OPD term on all of them; the proxy
  served each new adapter; held-out evaluations after 0, 32, 64 and 96 user turns. Not timed.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from hermes_opd.learning_study.paths import CONFIG_DIR
from hermes_opd.learning_study.proof import run_facts, transmission_verdict, verdict_line

REPO = Path(__file__).resolve().parents[2]
STEPS = 12
TURNS = 8 * STEPS


@pytest.mark.integration
def test_a_users_words_teach_the_student_a_value_it_never_chose_through_the_proxy(tmp_path):
    out = tmp_path / "live"
    config = CONFIG_DIR / "live-quick-transmission.yaml"
    done = subprocess.run(
        [sys.executable, "-m", "hermes_opd.commands.main", "bench", "live", "--quick"]
        + ["--config", str(config), "--out", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=1500,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    last = json.loads(done.stdout.strip().splitlines()[-1])
    assert list(last) == ["opd_live_gain", "user_turns"] and last["user_turns"] == TURNS
    record = json.loads((out / "live.json").read_text())
    assert (out / "live.png").stat().st_size > 10_000
    (run,) = record["runs"]
    assert run["arm"] == "opd"
    assert [x for x, _ in run["curve"]] == [0, 32, 64, 96]
    # the criterion every measured run was judged by (docs/recipes/live-bench.md)
    facts = run_facts(run)
    assert facts["followed_start"] == 0 and facts["passed_start"] == 0
    assert transmission_verdict(facts) == [], verdict_line(facts, transmission=True)
    # every user turn: one session, one reply, one sample; nothing dropped, nothing twice
    assert [len(r["sessions"]) for r in run["rounds"]] == [8] * STEPS
    feed = run["proxy_metrics"]["feed"]
    assert feed["submitted"] == feed["samples_grouped"] == TURNS and feed["dropped_queue_full"] == 0
    assert feed["groups_written"] == TURNS // 4 and feed["pending"] == 0
    counts = run["proxy_metrics"]["counts"]
    assert counts["requests"] == 2 * TURNS and counts["turns_ended_without_next_state_ended"] == TURNS
    assert run["proxy_metrics"]["policy_version"] == STEPS
    # the trainer: a step of 8 samples per round, each sampled by the adapter of the step before
    steps = run["trainer_steps"]
    assert len(steps) == STEPS
    for step in steps:
        assert step["batch/sequences"] == 8 and step["policy/lag_max"] == 0
        assert step["loss/opd"] > 0 and step["loss/total"] == pytest.approx(step["loss/opd"], rel=1e-4)
    assert sum(step["batch/teacher_coverage"] > 0 for step in steps) == STEPS
