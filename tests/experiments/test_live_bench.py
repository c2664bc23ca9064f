"""`hermes-opd bench live --quick` in the README's test command: a simulated user (the official
`openai` client) talks to the shipped copying student through a real `hermes-opd proxy`, which
trains it, with a real CPU vLLM (LoRA hot-loading), atroposlib's `run-api` and `hermes-opd train`;
OPD only, one seed, 6 rounds of 8 user turns (docs/recipes/live-bench.md).

What it asserts: every user turn became exactly one trained sample, sampled by the adapter of the
step before (lag 0) and delivered once; the trainer trained the OPD term on all of them; the proxy
served each new adapter; held-out evaluations ran after 0, 16, 32 and 48 user turns. Not timed.

It asserts no learning. Its former learning criterion (the env's, with the live margin
`proof.LIVE_MIN_MODULE_GAIN`: the module convention and held-out success each up by one) held in 11
of 11 runs with the user's words and in 4 of 7 under the constant-hint control when measured on
2026-12-06 (docs/recipes/live-bench.md, "The quick test's direction"): a criterion the control
passes cannot show that the words taught anything. The README test command's learning test is
tests/experiments/test_learning_student.py (transmission, in the env).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
START = 5 / 24
"""The shipped student's greedy held-out success before training (measured in every run)."""
TURNS = 48


@pytest.mark.integration
def test_every_user_turn_through_the_proxy_becomes_one_trained_sample(tmp_path):
    out = tmp_path / "live"
    done = subprocess.run(
        [sys.executable, "-m", "hermes_opd.commands.main", "bench", "live", "--quick", "--out", str(out)],
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
    assert [x for x, _ in run["curve"]] == [0, 16, 32, 48]
    assert run["curve"][0][1] == pytest.approx(START)
    # every user turn: one session, one reply, one sample; nothing dropped, nothing twice
    assert [len(r["sessions"]) for r in run["rounds"]] == [8] * 6
    feed = run["proxy_metrics"]["feed"]
    assert feed["submitted"] == feed["samples_grouped"] == TURNS and feed["dropped_queue_full"] == 0
    assert feed["groups_written"] == TURNS // 4 and feed["pending"] == 0
    counts = run["proxy_metrics"]["counts"]
    assert counts["requests"] == 2 * TURNS and counts["turns_ended_without_next_state_ended"] == TURNS
    assert run["proxy_metrics"]["policy_version"] == 6
    # the trainer: 6 steps of 8 samples, each sampled by the adapter of the step before
    steps = run["trainer_steps"]
    assert len(steps) == 6
    for step in steps:
        assert step["batch/sequences"] == 8 and step["policy/lag_max"] == 0
        assert step["loss/opd"] > 0 and step["loss/total"] == pytest.approx(step["loss/opd"], rel=1e-4)
    assert sum(step["batch/teacher_coverage"] > 0 for step in steps) == 6
