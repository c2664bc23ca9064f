"""The learning bench's pure parts: curves over generations, bands over seeds, the headline, stage
timings and the figure (the real loop: tests/experiments/test_learning_student.py)."""

from __future__ import annotations

import argparse

import pytest

from hermes_opd.learning_study.report import (
    RunRecords,
    convention_summary,
    equal_score_share,
    eval_curve,
    generations_to_reach,
    headline,
    mean_band,
    per_step_records,
    step_timings,
    summary_table,
)


def _run(arm: str, seed: int, evals: list[tuple[int, float]]) -> RunRecords:
    run = RunRecords(arm=arm, seed=seed, generations_per_step=8)
    run.evals = [{"policy_version": v, "eval/pass@1": s} for v, s in evals]
    return run


def test_curve_uses_generations_and_the_later_of_two_evals_of_one_version():
    run = _run("opd", 0, [(0, 0.1), (2, 0.2), (4, 0.3), (4, 0.4)])
    assert eval_curve(run) == [(0, 0.1), (16, 0.2), (32, 0.4)]


def test_band_interpolates_a_seed_between_its_own_evaluations():
    curves = [[(0, 0.0), (8, 0.5), (16, 1.0)], [(0, 0.2), (16, 0.6)]]
    assert mean_band(curves) == [
        (0, pytest.approx(0.1), 0.0, 0.2),
        (8, pytest.approx(0.45), pytest.approx(0.4), 0.5),  # the second seed: 0.2 + (0.6 - 0.2) / 2
        (16, pytest.approx(0.8), 0.6, 1.0),
    ]
    stopped_early = [(0, 0.0), (8, 0.5)]
    assert [x for x, *_ in mean_band([*curves, stopped_early])] == [0, 8]  # never extrapolated
    assert mean_band([]) == [] and mean_band([[], [(0, 0.1)]]) == []


def test_one_seed_evaluated_at_other_points_does_not_collapse_the_band():
    """Measured (docs/notes/learning-lab.md, student Q2): the serve worker evaluated five hybrid seeds at 0, 8,
    56, 80 and 96 generations and one at 0, 24, 48, 72 and 96. Keeping only the points every seed
    shared left 0 and 96, so the hybrid seemed to need all 96 generations to reach any target."""
    five = [[(0, 0.21), (8, 0.21), (56, 0.43), (80, 0.52), (96, 0.55)] for _ in range(5)]
    other = [(0, 0.21), (24, 0.25), (48, 0.42), (72, 0.62), (96, 0.71)]
    hybrid = mean_band([*five, other])
    assert [x for x, *_ in hybrid] == [0, 8, 24, 48, 56, 72, 80, 96]
    assert generations_to_reach(hybrid, 0.38) == 48
    grpo = [(0, 0.21, 0.21, 0.21), (96, 0.38, 0.29, 0.42)]
    assert headline({"grpo": grpo, "hybrid": hybrid})["hybrid_generations_over_grpo"] == 0.5


def test_headline_ratio_is_hybrid_generations_to_grpo_final_over_grpo_generations():
    bands = {
        "grpo": [(0, 0.1, 0.1, 0.1), (40, 0.3, 0.2, 0.4), (80, 0.5, 0.4, 0.6)],
        "opd": [(0, 0.1, 0.1, 0.1), (80, 0.35, 0.3, 0.4)],
        "hybrid": [(0, 0.1, 0.1, 0.1), (20, 0.5, 0.5, 0.5), (80, 0.7, 0.6, 0.8)],
    }
    result = headline(bands)
    assert list(result) == [
        "opd_only_gain",
        "grpo_only_final",
        "hybrid_final",
        "hybrid_generations_over_grpo",
    ]
    assert result == {
        "opd_only_gain": pytest.approx(0.25),
        "grpo_only_final": 0.5,
        "hybrid_final": 0.7,
        "hybrid_generations_over_grpo": 0.25,
    }
    bands["hybrid"] = [(0, 0.1, 0.1, 0.1), (80, 0.4, 0.4, 0.4)]
    assert headline(bands)["hybrid_generations_over_grpo"] is None  # never reached
    assert generations_to_reach(bands["hybrid"], 0.0) == 0
    flat = {
        "grpo": [(0, 0.0, 0.0, 0.0), (80, 0.0, 0.0, 0.0)],
        "hybrid": [(0, 0.0, 0.0, 0.0), (80, 0.0, 0.0, 0.0)],
    }
    assert headline(flat)["hybrid_generations_over_grpo"] is None  # GRPO-only learned nothing to reach
    assert headline({"opd": [(0, 0.0, 0.0, 0.0)]}) == {
        "opd_only_gain": None,
        "grpo_only_final": None,
        "hybrid_final": None,
        "hybrid_generations_over_grpo": None,
    }


def test_stage_timings_follow_the_version_each_step_trained_from():
    run = RunRecords(arm="hybrid", seed=0, generations_per_step=8)
    group = {
        "group/rollout_mean_s": 2.0,
        "group/opd_duration_mean_s": 0.5,
        "group/tail_after_rollouts_s": 0.4,
        "group/scores_equal": 1.0,
        "opd/hint_rate": 0.25,
    }
    run.env_groups = [
        {**group, "policy_version": 0},
        {**group, "policy_version": 0},
        {**group, "policy_version": 1, "group/scores_equal": 0.0, "opd/hint_rate": 0.75},
    ]
    run.trainer_steps = [
        {
            "policy/lag_mean": 0.0,
            "step_time_s": 1.0,
            "time/checkpoint_and_sync_s": 0.5,
            "loss/total": 1.5,
            "policy/lag_0_groups": 2.0,
            "policy/stale_groups_dropped": 0.0,
            "policy/unversioned_groups": 0.0,
        },
        {"policy/lag_mean": 0.0, "step_time_s": 1.0, "time/checkpoint_and_sync_s": 0.5, "grad_norm": 0.1},
    ]
    first, second = step_timings(run)
    # step 1 trained on version 0: two groups of 4 rollouts each
    assert first["rollouts_s"] == pytest.approx(16.0) and first["opd_s"] == pytest.approx(4.0)
    assert first["opd_share"] == pytest.approx(4.0 / (16 + 4 + 1 + 0.5))
    assert second["rollouts_s"] == pytest.approx(16.0)  # one group of all 8 rollouts
    rows = per_step_records(run)
    assert (
        rows[0]["hint_rate"] == 0.25 and rows[0]["equal_score_share"] == 1.0 and rows[0]["loss/total"] == 1.5
    )
    assert rows[1]["hint_rate"] == 0.75 and rows[1]["equal_score_share"] == 0.0
    assert (rows[0]["policy/lag_0_groups"], rows[0]["policy/stale_groups_dropped"]) == (2.0, 0.0)
    assert "policy/unversioned_groups" not in rows[0]
    assert equal_score_share(run.env_groups) == pytest.approx(2 / 3)
    assert equal_score_share([]) is None
    run.evals = [{"policy_version": 0, "eval/pass@1": 0.0}, {"policy_version": 2, "eval/pass@1": 0.5}]
    table = summary_table([run]).splitlines()
    assert table[0].split()[:4] == ["arm", "seed", "start", "end"]
    assert table[2].split()[:7] == ["hybrid", "0", "0.00", "0.50", "-", "-", "2"]  # no choices recorded
    assert convention_summary([run]) == {}


def test_which_convention_moved_is_summarised_per_arm_and_printed_per_run():
    def evaluation(version: int, module: int, name: int) -> dict:
        return {
            "policy_version": version,
            "eval/pass@1": (module + name) / 24,
            "conventions": {
                "module": {
                    "attempts": 12,
                    "followed": module,
                    "rate": module / 12,
                    "passed": module,
                    "chosen": {"helpers.py": module, "utils.py": 12 - module},
                },
                "name": {
                    "attempts": 12,
                    "followed": name,
                    "rate": name / 12,
                    "passed": name,
                    "chosen": {"compute": name, "get": 12 - name},
                },
            },
        }

    runs = []
    for seed, (module, name) in enumerate([(10, 3), (8, 1)]):
        run = RunRecords(arm="opd", seed=seed, generations_per_step=8)
        run.evals = [evaluation(0, 6, 3), evaluation(6, module, name)]
        runs.append(run)
    summary = convention_summary(runs)
    assert summary == pytest.approx(
        {
            "opd_module_convention_start": 0.5,
            "opd_module_convention_end": 0.75,
            "opd_module_convention_gain": 0.25,
            "opd_name_convention_start": 0.25,
            "opd_name_convention_end": 2 / 12,
            "opd_name_convention_gain": 2 / 12 - 0.25,
        }
    )
    rows = summary_table(runs).splitlines()
    assert rows[0].split()[4:6] == ["module", "name"]
    assert [row.split()[4:6] for row in rows[2:]] == [["6>10/12", "3>3/12"], ["6>8/12", "3>1/12"]]


def test_the_figure_is_a_png(tmp_path):
    from hermes_opd.learning_study.plot import plot_learning_curves

    path = plot_learning_curves(
        {"opd": [(0, 0.1, 0.0, 0.2), (8, 0.3, 0.2, 0.4)], "grpo": []}, tmp_path / "curve.png", "dev", 2
    )
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _args(**overrides) -> argparse.Namespace:
    from hermes_opd.learning_study.bench import add_arguments

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args([])
    for key, value in overrides.items():
        setattr(args, key, value)
    return args


def test_settings_precedence_and_clear_errors(tmp_path, dev_model_dir):
    from hermes_opd.contract.errors import ConfigError
    from hermes_opd.learning_study.bench import resolve_settings

    config = tmp_path / "bench.yaml"
    config.write_text("steps: 4\narms: opd,hybrid\nenv: {max_turns: 2}\ntrainer: {optim: {lr: 0.01}}\n")
    values, settings = resolve_settings(_args(config=str(config), steps=5, student_model=str(dev_model_dir)))
    assert (settings.steps, values["arms"], settings.env["max_turns"]) == (5, ["opd", "hybrid"], 2)
    assert settings.trainer == {"optim": {"lr": 0.01}} and settings.generations_per_step == 4
    quick_values, quick = resolve_settings(_args(quick=True, student_model=str(dev_model_dir)))
    assert (quick.steps, quick_values["arms"], quick_values["seeds"]) == (2, ["opd"], 1)
    with pytest.raises(ConfigError, match="arms must be a comma-separated subset of grpo,opd,hybrid"):
        resolve_settings(_args(arms="opd,ppo", student_model=str(dev_model_dir)))
    config.write_text("stepz: 4\n")
    with pytest.raises(ConfigError, match=r"unknown keys \['stepz'\]"):
        resolve_settings(_args(config=str(config), student_model=str(dev_model_dir)))
    with pytest.raises(ConfigError, match="has no config.json"):
        resolve_settings(_args(student_model=str(tmp_path)))
    with pytest.raises(ConfigError, match="group_size must be >= 2"):
        resolve_settings(_args(group_size=1, student_model=str(dev_model_dir)))
    config.write_text("seeds: 2\nfirst_seed: 3\n")
    later, _ = resolve_settings(_args(config=str(config), student_model=str(dev_model_dir)))
    assert (later["first_seed"], later["seeds"]) == (3, 2)
    assert resolve_settings(_args(first_seed=5, student_model=str(dev_model_dir)))[0]["first_seed"] == 5
    with pytest.raises(ConfigError, match="first_seed must be >= 0, got -1"):
        resolve_settings(_args(first_seed=-1, student_model=str(dev_model_dir)))
    every_step, _ = resolve_settings(_args(eval_every=1, student_model=str(dev_model_dir)))
    assert every_step["eval_every"] == 1  # the bench evaluates saved weights: any k >= 1 is exact
    with pytest.raises(ConfigError, match="eval_every must be >= 1, got 0"):
        resolve_settings(_args(eval_every=0, student_model=str(dev_model_dir)))


def test_report_only_rebuilds_the_outputs_from_finished_run_directories(tmp_path, dev_model_dir, capsys):
    import json

    from hermes_opd.learning_study.bench import run

    for arm, end in (("grpo", 0.2), ("hybrid", 0.4)):
        run_dir = tmp_path / f"{arm}-seed0"
        run_dir.mkdir()
        (run_dir / "run.json").write_text(
            json.dumps(
                {
                    "arm": arm,
                    "seed": 0,
                    "generations_per_step": 8,
                    "probe": {},
                    "start_eval": {"policy_version": 0, "eval/pass@1": 0.0},
                    "end_eval": {"policy_version": 2, "eval/pass@1": end},
                }
            )
        )
        (run_dir / "trainer.jsonl").write_text(
            "".join(
                json.dumps({"step": s, "policy/lag_mean": 0.0, "step_time_s": 1.0}) + "\n" for s in (1, 2)
            )
        )
        (run_dir / "env.jsonl").write_text(
            json.dumps({"kind": "eval", "eval/pass@1": end / 2, "eval/policy_version": 1.0}) + "\n"
        )
    (tmp_path / "opd-seed0").mkdir()  # an unfinished run (no run.json) is left out
    assert run(_args(report_only=True, out=str(tmp_path), student_model=str(dev_model_dir))) == 0
    last = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert last == {
        "grpo_only_final": 0.2,
        "hybrid_final": 0.4,
        "opd_only_gain": None,
        "hybrid_generations_over_grpo": 0.5,
    }
    document = json.loads((tmp_path / "learning.json").read_text())
    assert [(r["arm"], r["curve"]) for r in document["runs"]] == [
        ("grpo", [[0, 0.0], [8, 0.1], [16, 0.2]]),
        ("hybrid", [[0, 0.0], [8, 0.2], [16, 0.4]]),
    ]
    assert (tmp_path / "learning.png").is_file()


def test_the_bench_evaluates_every_kth_step_and_the_last():
    from hermes_opd.learning_study.loop import evaluation_steps

    assert evaluation_steps(12, 4) == [4, 8, 12]
    assert evaluation_steps(12, 5) == [5, 10, 12]
    assert evaluation_steps(3, 1) == [1, 2, 3]
    assert evaluation_steps(2, 4) == [2]


def test_a_run_evaluated_after_training_reads_its_evaluations_from_run_json(tmp_path):
    import json

    from hermes_opd.learning_study.loop import load_run

    (tmp_path / "run.json").write_text(
        json.dumps(
            {
                "arm": "opd",
                "seed": 1,
                "generations_per_step": 8,
                "probe": {},
                "start_eval": {"policy_version": 0, "eval/pass@1": 0.25},
                "evals": [
                    {"policy_version": 2, "eval/pass@1": 0.5},
                    {"policy_version": 3, "eval/pass@1": 0.625},
                ],
            }
        )
    )
    # a serve-loop evaluation in env.jsonl (an earlier bench's) is not read when run.json has `evals`
    (tmp_path / "env.jsonl").write_text(
        json.dumps({"kind": "eval", "eval/pass@1": 1.0, "eval/policy_version": 1})
    )
    assert eval_curve(load_run(tmp_path)) == [(0, 0.25), (16, 0.5), (24, 0.625)]
