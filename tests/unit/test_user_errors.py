"""Errors are told apart by type (environments/atropos/user_errors.py), not by their names as strings."""

from __future__ import annotations

import re
from pathlib import Path

from environments.atropos.user_errors import names_a_permanent_error, one_line_errors, permanent_errors
from hermes_opd.contract.errors import ConfigError
from hermes_opd.vllm_api.errors import ModelNotServedError

ROOT = Path(__file__).resolve().parents[2]


def test_a_subclass_is_told_apart_by_its_type():
    class Narrower(ModelNotServedError):
        pass

    assert isinstance(Narrower("x"), permanent_errors())
    assert isinstance(ConfigError("x"), one_line_errors())
    assert not isinstance(RuntimeError("ModelNotServedError"), one_line_errors())


def test_a_rollout_error_recorded_as_text_names_its_class():
    assert names_a_permanent_error(
        "a rollout stopped on a generation error: ModelNotServedError: no such model"
    )
    assert not names_a_permanent_error("a rollout stopped on a generation error: TimeoutError: slow")


def test_no_command_matches_exception_names_as_strings():
    pattern = re.compile(r"__name__ in \(|__name__ in [A-Z_]+|[A-Z_]*ERRORS = \(\s*\"")
    for relative in ("environments/atropos/cli.py", "hermes_opd/commands/process.py"):
        assert not pattern.search((ROOT / relative).read_text()), relative
