"""One spelling per concept across every command (hermes_opd/runtime/cli_flags.py, docs/cli.md):
the new flags, the old ones still working with a one-line notice, the global log-level flags
anywhere on the line, and `hermes-opd` dispatching through one registry."""

from __future__ import annotations

import argparse

import pytest

from hermes_opd.commands import main as cli
from hermes_opd.runtime.cli_flags import pop_global_log_level


def test_every_registered_command_has_a_main():
    import importlib

    for name, command in cli.COMMANDS.items():
        assert callable(importlib.import_module(command.module).main), name


def test_global_log_flags_anywhere_on_the_line_any_case():
    assert pop_global_log_level(["send", "f", "-v", "--x"]) == ("debug", ["send", "f", "--x"])
    assert pop_global_log_level(["--log-level", "WARNING", "send"]) == ("warning", ["send"])
    assert pop_global_log_level(["send", "--log-level=Error", "-v"]) == ("debug", ["send"])
    assert pop_global_log_level(["proxy", "--", "-v"]) == (None, ["proxy", "--", "-v"])
    with pytest.raises(argparse.ArgumentTypeError, match="got 'loud'"):
        pop_global_log_level(["--log-level", "loud"])


def test_main_passes_the_level_on_to_a_command_with_its_own(monkeypatch):
    seen = []
    monkeypatch.setattr("hermes_opd.commands.process.main", lambda argv: seen.append(argv) or 0)
    assert cli.main(["process", "--groups", "1", "-v"]) == 0
    assert seen == [["--log-level", "debug", "--groups", "1"]]


def test_unknown_command_and_bad_level_are_usage_errors(capsys):
    with pytest.raises(SystemExit) as raised:
        cli.main(["nope"])
    assert raised.value.code == 2
    assert cli.main(["--log-level", "loud", "validate", "x"]) == 2
    assert "log level must be one of" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("module", "argv", "old", "dest", "value"),
    [
        (
            "hermes_opd.commands.send",
            ["f.jsonl", "--api", "http://a:1"],
            "--api",
            "atropos_url",
            "http://a:1",
        ),
        ("hermes_opd.commands.process", ["--send", "http://a:1"], "--send", "atropos_url", "http://a:1"),
        ("hermes_opd.commands.proxy", ["--atropos", "http://a:1"], "--atropos", "atropos_url", "http://a:1"),
        ("hermes_opd.commands.demo", ["--vllm-url", "http://v:1"], "--vllm-url", "policy_url", "http://v:1"),
        (
            "hermes_opd.commands.demo",
            ["--server-url", "http://v:1/v1"],
            "--server-url",
            "policy_url",
            "http://v:1/v1",
        ),
    ],
)
def test_old_spellings_still_work_with_one_notice(module, argv, old, dest, value, capsys):
    import importlib

    parser = importlib.import_module(module).build_parser()
    args = parser.parse_args(argv)
    assert getattr(args, dest) == value
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{old} is deprecated" in err and f"--{dest.replace('_', '-')}" in err
    new_argv = [("--" + dest.replace("_", "-")) if a == old else a for a in argv]
    assert getattr(parser.parse_args(new_argv), dest) == value
    assert capsys.readouterr().err == ""


def test_bench_server_flag_is_policy_url():
    from hermes_opd.bench.common import add_server_arguments

    parser = argparse.ArgumentParser()
    add_server_arguments(parser)
    assert parser.parse_args(["--policy-url", "http://b/v1"]).base_url == "http://b/v1"
    assert parser.parse_args(["--base-url", "http://c/v1"]).base_url == "http://c/v1"


def test_proxy_takes_keys_from_flags_a_file_or_the_environment(tmp_path, monkeypatch):
    from hermes_opd.commands.proxy import KEYS_ENV, build_parser, config_from

    base = ["--policy-url", "http://p/v1", "--policy-model", "m", "--tokenizer", "t"]
    monkeypatch.setenv(KEYS_ENV, "env-key")
    assert config_from(build_parser().parse_args(base)).api_keys == ["env-key"]
    assert config_from(build_parser().parse_args([*base, "--api-key", "a", "--api-key", "b,c"])).api_keys == [
        "a",
        "b",
        "c",
    ]
    keys = tmp_path / "keys"
    keys.write_text("# trained\nk1\n\nk2\n")
    assert config_from(build_parser().parse_args([*base, "--api-key-file", str(keys)])).api_keys == [
        "k1",
        "k2",
    ]
    with pytest.raises(SystemExit):
        build_parser().parse_args([*base, "--api-key", "a", "--api-key-file", str(keys)])


def test_process_policy_url_is_the_openai_base_url(capsys):
    from hermes_opd.commands.process import main

    assert main(["--print-config", "--policy-url", "http://here:1/v1"]) == 0
    assert "base_url: http://here:1/v1" in capsys.readouterr().out
