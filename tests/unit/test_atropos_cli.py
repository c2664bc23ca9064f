"""The Atropos CLI path without a server: the command-line check, the eval report, the evaluate env class
and the role resolution. The subprocesses against the real dev vLLM are in tests/integration/test_atropos_cli.py."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from environments.atropos.eval_report import parse_eval_report
from tests.support.paths import LOCAL_CPU


def test_role_resolution_own_endpoints_rules_judge_and_opd_off():
    from environments.atropos.agentic_opd_config import AgenticOPDConfig
    from environments.pipeline.role_servers import describe_role_servers, resolve_role_servers

    policy = SimpleNamespace(base_url="http://p/v1", model_name="m", api_key="EMPTY")
    config = AgenticOPDConfig(
        tokenizer_name="x",
        judge_backend="llm",
        judge_base_url="http://j/v1",
        judge_model="jm",
        teacher_model="tm",
    )
    roles = resolve_role_servers(config, [policy])
    assert [(r.role, r.base_url, r.model, r.fallback) for r in roles] == [
        ("policy", "http://p/v1", "m", None),
        ("judge", "http://j/v1", "jm", None),
        ("teacher", "http://p/v1", "tm", "the policy server (teacher_base_url is not set)"),
    ]
    config = AgenticOPDConfig(tokenizer_name="x", judge_backend="rules", teacher_base_url="http://t/v1")
    assert describe_role_servers(resolve_role_servers(config, [policy])) == (
        "servers by role: policy: http://p/v1 (m); judge: rules backend, offline (no server); "
        "teacher: http://t/v1 (m), falls back to the model name of the policy server (teacher_model is not set)"
    )
    config = AgenticOPDConfig(tokenizer_name="x", opd_enabled=False)
    assert describe_role_servers(resolve_role_servers(config, [policy])) == (
        "servers by role: policy: http://p/v1 (m); judge: not used (opd_enabled is false); "
        "teacher: not used (opd_enabled is false)"
    )


def test_eval_report_round_trips():
    from environments.atropos.eval_report import EvalReport, format_eval_report

    report = EvalReport(
        "agentic-opd",
        {"eval/pass@1": 0.4, "eval/mean_score": 0.5625, "eval/tasks": 5.0},
        12.34,
        Path("runs/x/metrics.jsonl"),
        Path("evals/metrics.json"),
        "dev-model",
        "http://h/v1",
    )
    text = format_eval_report(report)
    assert text.splitlines()[0] == "evaluate: agentic-opd, 5 eval tasks, model dev-model at http://h/v1"
    assert parse_eval_report("noise\n" + text + "\ntrailing") == {
        "header": "evaluate: agentic-opd, 5 eval tasks, model dev-model at http://h/v1",
        "pass@1": "0.400",
        "mean score": "0.562",
        "tasks": "5",
        "time": "12.3 s",
        "metrics": 'runs/x/metrics.jsonl (the last line with "kind": "eval")',
        "eval log": "evals/metrics.json",
    }


def test_command_line_check_refuses_what_atroposlib_cannot_take(tmp_path):
    from environments.atropos.agentic_opd_env import AgenticOPDEnv
    from environments.atropos.cli import check_command_line, command_classes
    from hermes_opd.contract.errors import ConfigError

    commands, envs = command_classes(AgenticOPDEnv)
    assert set(commands) == set(envs) == {"serve", "process", "evaluate"}
    assert all(envs[mode].cli_mode == mode and issubclass(envs[mode], AgenticOPDEnv) for mode in envs)
    serve = commands["serve"]
    check_command_line(
        AgenticOPDEnv,
        [
            "--config",
            str(LOCAL_CPU),
            "--env.group_size",
            "2",
            "--slurm",
            "false",
            "--env.data_path_to_save_groups",
            "None",
        ],
        serve,
    )
    with pytest.raises(ConfigError, match=r"^--openai\.N\.KEY is a `hermes-opd process` flag"):
        check_command_line(AgenticOPDEnv, ["--openai.0.base_url", "http://x/v1"], serve)
    two = tmp_path / "two.yaml"
    two.write_text("openai:\n  - {base_url: 'http://a/v1'}\n  - {base_url: 'http://b/v1'}\n")
    check_command_line(AgenticOPDEnv, ["--config", str(two)], serve)
    with pytest.raises(ConfigError) as raised:
        check_command_line(AgenticOPDEnv, ["--config", str(two), "--openai.timeout", "5"], serve)
    assert str(raised.value) == (
        f"--openai.timeout: {two} lists 2 servers under 'openai', and Atropos' CLI takes no --openai.* flag "
        "then; change the YAML list (or use `hermes-opd process --openai.N.KEY`)"
    )
    with pytest.raises(
        ConfigError, match=r"^unknown flag --max_n_completion; did you mean --max_n_completions\?$"
    ):
        check_command_line(AgenticOPDEnv, ["--max_n_completion", "4"], serve)


def test_evaluate_env_class_opens_no_groups_file_and_keeps_the_metrics_next_to_it(dev_model_dir, tmp_path):
    from environments.atropos.agentic_opd_env import AgenticOPDEnv
    from environments.atropos.cli import cli_env_class

    config, servers = AgenticOPDEnv.config_init()
    config.tokenizer_name = str(dev_model_dir)
    config.data_path_to_save_groups = str(tmp_path / "run" / "groups.jsonl")
    env = cli_env_class(AgenticOPDEnv, "evaluate")(config, servers)
    assert env.jsonl_writer is None and env.config.data_path_to_save_groups is None
    assert env._metrics_path() == tmp_path / "run" / "metrics.jsonl"
    assert config.data_path_to_save_groups == str(tmp_path / "run" / "groups.jsonl"), (
        "the caller's config is kept"
    )
    assert not (tmp_path / "run").exists()
