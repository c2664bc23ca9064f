"""A bench's `student_model` may name a shipped student (hermes_opd/learning_study/paths.py), so a
config that names one works from any directory and from an installed package."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from hermes_opd.contract.errors import ConfigError
from hermes_opd.learning_study import bench, live_bench
from hermes_opd.learning_study.paths import (
    shipped_corrections_student_dir,
    shipped_student_dir,
    student_model_dir,
)


def test_a_shipped_name_is_the_packages_student_and_anything_else_a_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert student_model_dir("student_q2") == shipped_student_dir()
    assert student_model_dir("student_q2c") == shipped_corrections_student_dir()
    assert student_model_dir("student_q3") == Path("student_q3")  # not shipped: a relative path
    assert student_model_dir(tmp_path / "m") == tmp_path / "m"


@pytest.mark.parametrize(
    ("module", "resolve_values"),
    [
        (bench, lambda args: bench.resolve_settings(args)[0]),
        (live_bench, lambda args: live_bench.resolve(args)[0]),
    ],
)
def test_both_benches_take_a_shipped_students_name(tmp_path, monkeypatch, module, resolve_values):
    monkeypatch.chdir(tmp_path)  # the name must not depend on the working directory
    parser = argparse.ArgumentParser()
    module.add_arguments(parser)
    values = resolve_values(parser.parse_args(["--student-model", "student_q2c", "--out", str(tmp_path)]))
    assert values["student_model"] == str(shipped_corrections_student_dir())
    with pytest.raises(ConfigError, match="no config.json"):
        resolve_values(parser.parse_args(["--student-model", "student_q3", "--out", str(tmp_path)]))
