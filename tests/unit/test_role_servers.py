"""The one role rule (environments/pipeline/role_servers.py, docs/roles.md): the env and the proxy,
built from the same OPD config, give every role the same endpoint and key."""

from __future__ import annotations

import itertools
from types import SimpleNamespace

import pytest

from environments.atropos.agentic_opd_config import AgenticOPDConfig
from environments.pipeline.role_servers import resolve_role_servers
from environments.proxy.build import proxy_role_servers
from environments.proxy.proxy_config import ProxyConfig

KEY_VAR = "HERMES_OPD_TEST_ROLE_KEY"


def _opd_block(teacher_url, teacher_key, judge_url, judge_key, prm, prm_url, prm_key) -> dict:
    teacher = {"base_url": teacher_url, "api_key_env": KEY_VAR + "_T" if teacher_key else None}
    judge = {"backend": "llm", "base_url": judge_url, "api_key_env": KEY_VAR + "_J" if judge_key else None}
    prm_judge = {"backend": "llm", "base_url": prm_url, "api_key_env": KEY_VAR + "_P" if prm_key else None}
    return {"teacher": teacher, "judge": judge, "prm": {"enabled": prm, "judge": prm_judge}}


def _endpoints(roles) -> dict[str, tuple]:
    return {r.role: (r.base_url, r.model, r.api_key) for r in roles}


COMBINATIONS = list(
    itertools.product(
        [None, "http://t/v1"],
        [False, True],
        [None, "http://j/v1"],
        [False, True],
        [False, True],
        [None, "http://r/v1"],
        [False, True],
        [None, "pk"],
    )
)


@pytest.mark.parametrize("combo", COMBINATIONS, ids=lambda c: "-".join(str(bool(x))[0] for x in c))
def test_env_and_proxy_resolve_the_same_servers_and_keys(combo, monkeypatch):
    *opd_args, policy_key = combo
    for suffix in "TJP":
        monkeypatch.setenv(f"{KEY_VAR}_{suffix}", f"key-{suffix}")
    opd = _opd_block(*opd_args)
    policy = SimpleNamespace(base_url="http://p/v1", model_name="pm", api_key=policy_key)
    env_roles = resolve_role_servers(AgenticOPDConfig(tokenizer_name="x", opd=opd), [policy])
    proxy = ProxyConfig(
        policy_base_url="http://p/v1", policy_model="pm", policy_api_key=policy_key, tokenizer="x", opd=opd
    )
    proxy_roles = proxy_role_servers(proxy)
    assert _endpoints(env_roles) == _endpoints(proxy_roles)
    assert env_roles.teacher_is_policy == proxy_roles.teacher_is_policy


def test_the_rule_itself(monkeypatch):
    monkeypatch.setenv(f"{KEY_VAR}_J", "key-J")
    policy = SimpleNamespace(base_url="http://p/v1", model_name="pm", api_key="policy-key")

    def roles(opd):
        return _endpoints(resolve_role_servers(AgenticOPDConfig(tokenizer_name="x", opd=opd), [policy]))

    # A teacher with its own URL and no key sends no key: the policy's key never leaves for another server.
    got = roles(_opd_block("http://t/v1", False, None, False, False, None, False))
    assert got["teacher"] == ("http://t/v1", "pm", None)
    assert got["judge"] == ("http://p/v1", "pm", "policy-key")
    # The process judge follows the hint judge's server (URL and key), not the policy's.
    got = roles(_opd_block(None, False, "http://j/v1", True, True, None, False))
    assert got["prm judge"] == ("http://j/v1", "pm", "key-J")
    assert got["teacher"] == ("http://p/v1", "pm", "policy-key")
    # ... and the policy server when the hint judge is offline.
    opd = _opd_block(None, False, None, False, True, None, False)
    opd["judge"] = {"backend": "rules"}
    assert roles(opd)["prm judge"] == ("http://p/v1", "pm", "policy-key")
    assert "prm judge" not in roles(_opd_block(None, False, None, False, False, None, False))


def test_describe_names_the_process_judges_fallback():
    from environments.pipeline.role_servers import describe_role_servers

    policy = SimpleNamespace(base_url="http://p/v1", model_name="pm", api_key=None)
    opd = {"judge": {"backend": "llm", "base_url": "http://j/v1", "model": "jm"}, "prm": {"enabled": True}}
    line = describe_role_servers(
        resolve_role_servers(AgenticOPDConfig(tokenizer_name="x", opd=opd), [policy])
    )
    assert line.endswith(
        "prm judge: http://j/v1 (jm), falls back to the hint judge's server (prm_judge_base_url is not set)"
    )
    proxy = ProxyConfig(policy_base_url="http://p/v1", policy_model="pm", tokenizer="x", opd=opd)
    assert "(opd.prm.judge.base_url is not set)" in describe_role_servers(proxy_role_servers(proxy))


def test_env_takes_the_proxys_opd_shape_and_env_flags_still_win(tmp_path):
    from environments.atropos.agentic_opd_env import AgenticOPDEnv
    from environments.atropos.config_loading import load_job_config, split_overrides
    from hermes_opd.contract.errors import ConfigError

    path = tmp_path / "job.yaml"
    path.write_text("env:\n  opd:\n    judge: {m: 5, backend: rules}\n    prm: {enabled: true}\n")
    job = load_job_config(path, env_cls=AgenticOPDEnv)
    assert (job.env.judge_votes, job.env.judge_backend, job.env.prm_enabled) == (5, "rules", True)
    overrides, _ = split_overrides(["--env.judge_votes", "7"])
    assert load_job_config(path, overrides, env_cls=AgenticOPDEnv).env.judge_votes == 7
    path.write_text("env:\n  judge_votes: 4\n  opd:\n    judge: {m: 5}\n")
    with pytest.raises(ConfigError, match="env.judge_votes and its nested spelling in env.opd disagree"):
        load_job_config(path, env_cls=AgenticOPDEnv)
    path.write_text("env:\n  opd:\n    judge: {api_key: secret}\n")
    with pytest.raises(ConfigError, match="opd.judge.api_key is not a setting here"):
        load_job_config(path, env_cls=AgenticOPDEnv)


def test_atroposlibs_merged_dict_lets_a_flag_win_over_the_nested_yaml():
    # atroposlib merges defaults, the YAML env section and the --env.* flags into one dict
    merged = {
        **AgenticOPDConfig(tokenizer_name="x").model_dump(),
        "opd": {"judge": {"m": 5, "temperature": 0.2}},
    }
    merged["judge_votes"] = 7  # --env.judge_votes 7
    config = AgenticOPDConfig(**merged)
    assert (config.judge_votes, config.judge_temperature) == (7, 0.2)
