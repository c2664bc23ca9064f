"""`hermes-opd bench live`'s settings and headline (hermes_opd/learning_study/live_bench.py)."""

from __future__ import annotations

import argparse
import asyncio
import json

import pytest
import yaml

from hermes_opd.contract.errors import ConfigError
from hermes_opd.learning_study.live_bench import add_arguments, live_headline, resolve
from hermes_opd.learning_study.live_loop import LIVE_ARMS, live_trainer_document, proxy_document
from hermes_opd.learning_study.paths import CONFIG_DIR, shipped_corrections_student_dir
from judge.config import JudgeConfig


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(list(argv))


def test_quick_is_opd_only_one_seed_with_the_full_user_turns(tmp_path):
    values, settings = resolve(parse("--quick", "--out", str(tmp_path)))
    assert values["arms"] == ["opd"] and values["seeds"] == 1
    assert settings.loop.steps == 6 and settings.samples_per_step == 8
    assert settings.loop.env["task_source"] == "conventions" and settings.loop.env["max_turns"] == 1


def test_unknown_arm_and_bad_sizes_are_refused():
    with pytest.raises(ConfigError, match="arms must be a comma-separated subset of opd,prm,combined"):
        resolve(parse("--arms", "opd,grpo"))
    with pytest.raises(ConfigError, match="steps must be >= 1"):
        resolve(parse("--steps", "0"))


def test_each_arm_sets_its_pipeline_and_its_loss_weights(tmp_path):
    _, settings = resolve(parse("--out", str(tmp_path)))
    settings.loop.vllm_root_url = "http://127.0.0.1:1"
    for arm, (w_opd, w_prm) in LIVE_ARMS.items():
        proxy = proxy_document(settings, arm, port=1, api_url="http://a", prefix="p", run_dir=tmp_path)
        assert proxy["opd"]["enabled"] is (w_opd > 0) and proxy["opd"]["prm"]["enabled"] is (w_prm > 0)
        assert proxy["opd"]["judge"]["rules_quote_user_feedback"] is True
        assert proxy["policy_lora_prefix"] == "p" and proxy["samples_per_group"] == 4
        trainer = live_trainer_document(
            settings, arm, seed=0, prefix="p", run_dir=tmp_path, api_url="http://a"
        )
        assert trainer["loss"] == {"w_grpo": 0.0, "w_opd": w_opd, "w_prm": w_prm}
        assert trainer["atropos"]["batch_size"] == 8


def test_the_headline_is_the_mean_gain_per_arm_then_user_turns():
    runs = [{"arm": "opd", "gain": 0.125}, {"arm": "opd", "gain": -0.0417}, {"arm": "prm", "gain": 0.0}]
    assert live_headline(runs, ["opd", "prm"], 48) == {
        "opd_live_gain": pytest.approx(0.0417, abs=2e-4),
        "prm_live_gain": 0.0,
        "user_turns": 48,
    }


def test_the_constant_control_changes_only_the_hint_judge(tmp_path):
    args = parse("--quick", "--config", str(CONFIG_DIR / "live-quick-constant.yaml"), "--out", str(tmp_path))
    values, settings = resolve(args)
    settings.loop.vllm_root_url = "http://127.0.0.1:1"
    judge = proxy_document(settings, "opd", port=1, api_url="http://a", prefix="p", run_dir=tmp_path)["opd"][
        "judge"
    ]
    assert judge == {
        "backend": "constant",
        "rules_quote_user_feedback": True,
        "constant_hint_turns": "failed",
    }
    _, plain = resolve(parse("--quick", "--out", str(tmp_path)))
    assert (values["arms"], settings.loop.steps, settings.samples_per_step) == (["opd"], plain.loop.steps, 8)


def test_report_only_rebuilds_the_outputs_from_run_directories(tmp_path, capsys):
    from hermes_opd.learning_study.live_bench import run

    for arm, seed, gain in (("opd", 0, 1 / 24), ("prm", 0, 0.0), ("opd", 3, 2 / 24)):
        run_dir = tmp_path / f"{arm}-seed{seed}"
        run_dir.mkdir()
        curve = [(0, 5 / 24), (48, 5 / 24 + gain)]
        rounds = [{"accepted": 0, "user_turns": 8}, {"accepted": 2, "user_turns": 8}]
        record = {"arm": arm, "seed": seed, "gain": gain, "curve": curve, "rounds": rounds, "wall_s": 1.0}
        (run_dir / "run.json").write_text(json.dumps(record))
    assert run(parse("--report-only", "--out", str(tmp_path))) == 0
    last = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert last == {"opd_live_gain": pytest.approx(0.0625, abs=1e-4), "prm_live_gain": 0.0, "user_turns": 48}
    assert (tmp_path / "live.png").is_file() and json.loads((tmp_path / "live.json").read_text())["runs"]


@pytest.mark.parametrize(
    ("control", "differs"),
    [
        ("constant", {"judge": {"backend": "constant", "constant_hint_turns": "failed"}}),
        ("noinfo", {"judge": {"backend": "redacted"}}),
        ("flip", {"trainer": {"loss": {"kl_direction": "forward", "opd_sign": -1}}}),
    ],
)
def test_each_control_of_the_live_transmission_test_changes_one_thing(tmp_path, control, differs):
    """Same student, convention, budget and evaluation as live-quick-transmission.yaml; only the hint
    source (constant, redacted) or the OPD sign differs."""
    configs = [
        CONFIG_DIR / "live-quick-transmission.yaml",
        CONFIG_DIR / f"live-quick-transmission-{control}.yaml",
    ]
    real, ctl = (yaml.safe_load(path.read_text()) for path in configs)
    assert {k: v for k, v in ctl.items() if real.get(k) != v} == differs
    assert set(real) - set(ctl) == set()
    values, settings = resolve(parse("--quick", "--config", str(configs[1]), "--out", str(tmp_path)))
    assert values["student_model"] == str(shipped_corrections_student_dir())
    assert (settings.loop.steps, settings.loop.lr, values["convention"]) == (12, 1e-3, "compute,utils")


def test_the_no_information_control_redacts_the_users_words(tmp_path):
    from judge.make_backend import make_judge_backend
    from tests.support.judge_pairs import pair_with

    config = CONFIG_DIR / "live-quick-transmission-noinfo.yaml"
    _, settings = resolve(parse("--quick", "--config", str(config), "--out", str(tmp_path)))
    settings.loop.vllm_root_url = "http://127.0.0.1:1"
    judge = proxy_document(settings, "opd", port=1, api_url="http://a", prefix="p", run_dir=tmp_path)["opd"][
        "judge"
    ]
    assert judge == {"backend": "redacted", "rules_quote_user_feedback": True}
    reply = {"role": "user", "content": "Wrong file: the team's convention is utils.py for all code."}
    (vote, *_) = asyncio.run(make_judge_backend(JudgeConfig(**judge, m=1)).collect_votes(pair_with(reply)))
    assert vote.hint == "Wrong file: the team's convention is the expected name for all code."


def test_the_live_bench_runs_under_a_convention_the_student_never_chose(tmp_path, monkeypatch):
    from environments.tasks.conventions import CONVENTION_ENV
    from hermes_opd.learning_study.bench_values import apply_convention
    from hermes_opd.learning_study.live_loop import SimulatedUser

    config = CONFIG_DIR / "live-quick-transmission.yaml"
    values, settings = resolve(parse("--quick", "--config", str(config), "--out", str(tmp_path)))
    assert values["convention"] == "compute,utils" and settings.loop.steps == 12
    monkeypatch.setenv(CONVENTION_ENV, "")  # restored after the test, whatever apply_convention sets
    apply_convention(values)
    # the simulated user asks for the tasks of that convention, each with its own spec
    user = SimulatedUser(settings, seed=0)
    assert len(user.tasks) == 56
    assert all(spec.task_id == task.task_id and spec.module == "utils" for spec, task in user.tasks)
    with pytest.raises(ConfigError, match="convention"):
        resolve(parse("--convention", "nope", "--out", str(tmp_path)))
