"""`hermes-opd demo` without a server: its counts, the hints it reads back, and a rerun that clears the
earlier run. The demo end to end is in tests/integration/test_demo.py."""

from __future__ import annotations

import json


def test_demo_refuses_bad_counts_with_exit_code_2():
    from hermes_opd.commands.demo import main

    assert main(["--steps", "0"]) == 2
    assert main(["--groups", "0", "--dev-model"]) == 2


def test_read_hints_counts_the_judged_turns_hints_and_a_failing_rollouts_feedback(tmp_path):
    from hermes_opd.commands.demo_learning import read_hints

    def turn(status, hint=None):
        return {"span": [0, 1], "status": status, "hint": hint, "next_state_role": "user"}

    hint = "Define `compute_mileage` in `helpers.py`, with exactly that name."
    group = {
        "scores": [0.0, 1.0],
        "overrides": [
            {"opd": {"version": 1, "turns": [turn("scored", hint)]}},
            {"opd": {"version": 1, "turns": [turn("no_hint"), turn("no_next_state")]}},
        ],
        "messages": [
            [
                {"role": "user", "content": "task"},
                {"role": "assistant", "content": "call"},
                {"role": "tool", "content": "wrote helpers.py"},
                {"role": "user", "content": "ImportError: compute_mileage"},
            ],
            [{"role": "user", "content": "task"}, {"role": "assistant", "content": "call"}],
        ],
    }
    path = tmp_path / "groups.jsonl"
    path.write_text(json.dumps(group) + "\n")
    hints, judged, feedback = read_hints(path)
    assert dict(hints) == {hint: 1} and judged == 2
    assert feedback == "ImportError: compute_mileage"


def test_a_rerun_clears_the_earlier_runs_loop_directory_and_outputs(tmp_path):
    from hermes_opd.commands.demo_learning import clear_earlier_run

    (tmp_path / "opd-seed0").mkdir()
    (tmp_path / "opd-seed0" / "trainer.jsonl").write_text('{"step": 1}\n')  # the trainer appends to it
    (tmp_path / "opd-seed1").mkdir()
    for name in ("start_eval.jsonl", "learning.json", "validation.json", "vllm.log"):
        (tmp_path / name).write_text("earlier\n")
    clear_earlier_run(tmp_path, seed=0)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["opd-seed1", "vllm.log"]
