"""Every file in configs/ loads and validates; the job-config loader rejects what it must."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest
import yaml

from environments.atropos.agentic_opd_env import AgenticOPDEnv
from environments.atropos.config_loading import build_job_config, load_job_config, split_overrides
from hermes_opd.contract.errors import ConfigError

CONFIG_DIR = Path(__file__).resolve().parents[2] / "configs"
CONFIG_FILES = sorted(CONFIG_DIR.glob("*.yaml"))


def _is_trainer_config(path: Path) -> bool:
    data = yaml.safe_load(path.read_text()) or {}
    return isinstance(data, dict) and "trainer" in data


def test_configs_exist():
    names = {p.name for p in CONFIG_FILES}
    assert {"local-cpu.yaml", "vllm-qwen3.yaml", "separate-judge.yaml"} <= names


@pytest.mark.parametrize("path", CONFIG_FILES, ids=lambda p: p.name)
def test_config_file_loads(path: Path):
    text = path.read_text()
    assert text.lstrip().startswith("#"), f"{path.name} should open with comments saying how to run it"
    if _is_trainer_config(path):
        try:
            trainer_config = importlib.import_module("trainer_adapters.trainer_config")
        except ImportError as exc:
            pytest.skip(f"trainer_adapters.trainer_config is not available: {exc}")
        loader = getattr(trainer_config, "load_trainer_config", None)
        if loader is None:
            pytest.skip("trainer_adapters.trainer_config has no load_trainer_config")
        config = loader(path)
        assert config is not None
        return
    assert f"--config configs/{path.name}" in text, f"{path.name} should show its run command"
    job = load_job_config(path, env_cls=AgenticOPDEnv)
    assert job.servers and all(s.base_url and s.model_name for s in job.servers)
    assert job.env.group_size >= 1 and job.env.total_steps >= 1
    assert job.env.data_path_to_save_groups, "each runnable config names its output file"
    assert job.env.use_wandb is False
    assert job.concurrency >= 1
    if job.env.opd_enabled:
        # top-K teacher rows need a vLLM started with --max-logprobs above K; each file says so
        assert "--max-logprobs" in text


def test_local_cpu_matches_the_demo():
    from hermes_opd.commands.demo import DEMO_CONCURRENCY, DEMO_ENV

    data = yaml.safe_load((CONFIG_DIR / "local-cpu.yaml").read_text())
    for key, value in DEMO_ENV.items():
        assert data["env"][key] == value, f"local-cpu.yaml env.{key} differs from the demo"
    assert data["process"]["concurrency"] == DEMO_CONCURRENCY


def test_separate_judge_has_its_own_endpoints():
    job = load_job_config(CONFIG_DIR / "separate-judge.yaml", env_cls=AgenticOPDEnv)
    policy_urls = {s.base_url for s in job.servers}
    assert len(job.servers) == 2
    assert job.env.judge_base_url not in policy_urls
    assert job.env.teacher_base_url not in policy_urls
    assert job.env.teacher_base_url != job.env.judge_base_url


def test_vllm_qwen3_uses_one_server_for_everything():
    job = load_job_config(CONFIG_DIR / "vllm-qwen3.yaml", env_cls=AgenticOPDEnv)
    assert len(job.servers) == 1
    assert job.env.judge_backend == "llm"
    assert job.env.judge_base_url is None and job.env.teacher_base_url is None
    assert "Qwen3" in job.servers[0].model_name
    assert job.env.tokenizer_name == job.servers[0].tokenizer_name


# -- the loader ----------------------------------------------------------------------------------
def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "job.yaml"
    path.write_text(text)
    return path


def test_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_job_config(tmp_path / "nope.yaml", env_cls=AgenticOPDEnv)


def test_bad_yaml_names_the_line(tmp_path):
    path = _write(tmp_path, "env:\n  group_size: 4\n  max_turns: [1, 2\n")
    with pytest.raises(ConfigError, match=r"not valid YAML \(line \d+"):
        load_job_config(path, env_cls=AgenticOPDEnv)


def test_top_level_must_be_a_mapping(tmp_path):
    with pytest.raises(ConfigError, match="top level must be a mapping"):
        load_job_config(_write(tmp_path, "- a\n- b\n"), env_cls=AgenticOPDEnv)


def test_unknown_env_key_suggests_the_right_one(tmp_path):
    path = _write(tmp_path, "env:\n  max_turn: 3\n")
    with pytest.raises(ConfigError, match=r"env\.max_turn: unknown key 'max_turn'; did you mean 'max_turns'"):
        load_job_config(path, env_cls=AgenticOPDEnv)


def test_unknown_top_level_and_openai_keys(tmp_path):
    with pytest.raises(ConfigError, match="unknown key 'envv'"):
        load_job_config(_write(tmp_path, "envv:\n  seed: 1\n"), env_cls=AgenticOPDEnv)
    with pytest.raises(ConfigError, match=r"openai\.base_ur: unknown key .*did you mean 'base_url'"):
        load_job_config(_write(tmp_path, "openai:\n  base_ur: http://x/v1\n"), env_cls=AgenticOPDEnv)
    with pytest.raises(ConfigError, match=r"openai\[1\]\.modelname"):
        load_job_config(
            _write(tmp_path, "openai:\n  - base_url: http://a/v1\n  - modelname: m\n"), env_cls=AgenticOPDEnv
        )
    with pytest.raises(ConfigError, match=r"process\.concurency"):
        load_job_config(_write(tmp_path, "process:\n  concurency: 2\n"), env_cls=AgenticOPDEnv)


def test_invalid_value_is_named(tmp_path):
    with pytest.raises(ConfigError, match=r"env\.max_turns: Input should be greater than or equal to 1"):
        load_job_config(_write(tmp_path, "env:\n  max_turns: 0\n"), env_cls=AgenticOPDEnv)


def test_overrides_parse_types_and_win_over_yaml(tmp_path):
    path = _write(tmp_path, "env:\n  max_turns: 3\n  seed: 1\nopenai:\n  base_url: http://a/v1\n")
    overrides, rest = split_overrides(
        [
            "--env.max_turns",
            "5",
            "--env.opd_enabled=false",
            "--env.judge_model",
            "null",
            "--openai.base_url",
            "http://b:1/v1",
            "--openai.api_key",
            "123",
            "--out",
            "x.jsonl",
            "--env.include_messages",
        ]
    )
    assert rest == ["--out", "x.jsonl"]
    job = load_job_config(path, overrides, env_cls=AgenticOPDEnv)
    assert job.env.max_turns == 5 and job.env.seed == 1
    assert job.env.opd_enabled is False and job.env.judge_model is None and job.env.include_messages is True
    assert job.servers[0].base_url == "http://b:1/v1"
    assert job.servers[0].api_key == "123"  # a str field keeps the string
    assert job.raw["openai"][0]["api_key"] == "***"  # never printed


def test_override_errors():
    with pytest.raises(ConfigError, match=r"--env\.max_turnz: unknown key"):
        build_job_config({}, split_overrides(["--env.max_turnz", "3"])[0], env_cls=AgenticOPDEnv)
    with pytest.raises(ConfigError, match=r"--env\.max_turns 'many'"):
        build_job_config({}, split_overrides(["--env.max_turns", "many"])[0], env_cls=AgenticOPDEnv)
    two = {"openai": [{"base_url": "http://a/v1"}, {"base_url": "http://b/v1"}]}
    with pytest.raises(ConfigError, match=r"say which one with --openai\.N\.KEY"):
        build_job_config(two, split_overrides(["--openai.base_url", "http://c/v1"])[0], env_cls=AgenticOPDEnv)
    job = build_job_config(
        two, split_overrides(["--openai.1.base_url", "http://c/v1"])[0], env_cls=AgenticOPDEnv
    )
    assert [s.base_url for s in job.servers] == ["http://a/v1", "http://c/v1"]
    with pytest.raises(ConfigError, match="only 2 server"):
        build_job_config(
            two, split_overrides(["--openai.2.base_url", "http://c/v1"])[0], env_cls=AgenticOPDEnv
        )


def test_defaults_are_process_friendly():
    job = build_job_config({}, env_cls=AgenticOPDEnv)
    assert job.env.use_wandb is False  # Atropos' process turns wandb on; we do not
    assert job.env.include_messages is True
    assert isinstance(job.servers, list) and len(job.servers) == 1
    listed = build_job_config(
        {"openai": [{"base_url": "http://a/v1", "model_name": "m"}]}, env_cls=AgenticOPDEnv
    )
    assert listed.servers[0].model_name == "m"
    assert listed.servers[0].timeout == job.servers[0].timeout  # list entries merge over the defaults
