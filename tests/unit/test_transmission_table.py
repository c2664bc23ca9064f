"""The transmission test's table (hermes_opd/learning_study/transmission.py) on a hand-made learning.json."""

from __future__ import annotations

import json

from hermes_opd.learning_study.transmission import main, run_label, run_rows


def evaluation(passed: int, module: int, name: int) -> dict:
    return {
        "eval/pass@1": passed / 24,
        "eval/tasks": 24.0,
        "conventions": {
            "module": {"attempts": 12, "followed": module},
            "name": {"attempts": 12, "followed": name},
        },
    }


def document(constant: bool) -> dict:
    env = {"judge_backend": "constant"} if constant else {}
    run = {
        "arm": "opd",
        "seed": 1,
        "curve": [[0, 0.0], [48, 0.125]],
        "evals": [evaluation(0, 0, 0), evaluation(3, 0, 3)],
    }
    return {"settings": {"convention": "compute,utils", "env": env}, "runs": [run]}


def test_rows_are_labelled_by_the_control_and_counted_per_convention(tmp_path, capsys):
    rows = run_rows(document(constant=False)) + run_rows(document(constant=True))
    assert [r["label"] for r in rows] == ["opd", "constant hint"]
    assert rows[0]["points"][-1] == {"generations": 48, "passed": 3, "module": 0, "name": 3}
    for name, constant in (("real", False), ("control", True)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "learning.json").write_text(json.dumps(document(constant)))
    assert main([str(tmp_path / "t.png"), str(tmp_path / "real"), str(tmp_path / "control")]) == 0
    out = capsys.readouterr().out
    assert "opd                         1  compute,utils    0/3" in out and (tmp_path / "t.png").is_file()


def test_each_control_has_its_label():
    run = {"arm": "opd"}

    def label(env: dict, loss: dict) -> str:
        return run_label({"settings": {"env": env, "trainer": {"loss": loss}}}, run)

    assert label({}, {}) == "opd"
    assert label({"judge_backend": "redacted"}, {}) == "no-info words"
    assert label({}, {"opd_sign": -1}) == "opd sign flip"
    assert label({"judge_backend": "constant"}, {"kl_direction": "forward"}) == "constant hint fwd"
    assert run_label({"settings": {}}, {"arm": "grpo"}) == "grpo"
    forward = {"settings": {"trainer": {"loss": {"kl_direction": "forward"}}}}
    assert (
        run_label(forward, {"arm": "grpo"}) == "grpo"
        and run_label(forward, {"arm": "hybrid"}) == "hybrid fwd"
    )
