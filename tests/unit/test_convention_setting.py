"""The team's convention set to other candidates (environments/tasks/conventions.py `Convention`,
`HERMES_OPD_CONVENTION`): the same tasks and prompts' candidates, the checker's name and file changed,
and the choices classified by the task's own convention (environments/tasks/convention_choice.py)."""

from __future__ import annotations

import pytest

from environments.tasks.convention_choice import classify, convention_task
from environments.tasks.conventions import (
    CONVENTION_ENV,
    Convention,
    convention_splits,
    generate,
    team_convention,
)


def test_a_convention_changes_only_the_checkers_name_file_and_id():
    shipped, other = generate(), generate(convention=Convention("find", "utils"))
    for split in shipped:
        for a, b in zip(shipped[split], other[split], strict=True):
            assert b.task_id == a.task_id + "-find-utils"
            assert (a.kind, a.noun, a.operator, a.constant, a.candidates) == (
                b.kind,
                b.noun,
                b.operator,
                b.constant,
                b.candidates,
            )
            assert b.function == f"find_{a.noun}" and b.module == "utils"
            assert b.hidden_tests()["module"] == "utils"
            if a.kind == "module":  # the prompt states the name: now the convention's
                assert f"`find_{a.noun}(x)`" in b.prompt()
            else:  # the prompt states the file
                assert "`utils.py`" in b.prompt()


def test_choices_are_classified_by_the_tasks_own_convention():
    task = convention_task("convention-heldout-module-revenue-find-utils")
    assert task is not None and task.module == "utils"
    assert classify(task, [("utils.py", "def find_revenue(x): ...")], True).followed
    assert not classify(task, [("helpers.py", "def find_revenue(x): ...")], False).followed
    name = convention_task("convention-heldout-name-revenue-find-utils")
    assert classify(name, [("utils.py", "def find_revenue(x):\n")], True).followed
    assert not classify(name, [("utils.py", "def compute_revenue(x):\n")], False).followed
    assert convention_task("convention-heldout-name-revenue-nope-utils") is None
    shipped = convention_task("convention-heldout-module-revenue")
    assert classify(shipped, [("helpers.py", "")], False).followed


def test_the_environment_sets_the_convention_of_the_splits(monkeypatch):
    monkeypatch.delenv(CONVENTION_ENV, raising=False)
    assert team_convention().default
    assert convention_splits()[1][0].task_id.count("-") == 3
    monkeypatch.setenv(CONVENTION_ENV, "compute,utils.py")
    assert team_convention() == Convention("compute", "utils")
    train, heldout = convention_splits()
    assert len(train) == 56 and len(heldout) == 24
    assert all(t.task_id.endswith("-compute-utils") for t in train + heldout)
    assert all(list(t.solution_files) == ["utils.py"] for t in heldout)
    monkeypatch.setenv(CONVENTION_ENV, "compute")
    with pytest.raises(ValueError):
        team_convention()
    with pytest.raises(ValueError):
        Convention("make", "helpers")


def test_the_bench_takes_a_convention_and_checks_it(tmp_path):
    import argparse

    from hermes_opd.contract.errors import ConfigError
    from hermes_opd.learning_study.bench import add_arguments, resolve_settings
    from hermes_opd.learning_study.paths import shipped_student_dir

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    base = ["--student-model", str(shipped_student_dir()), "--out", str(tmp_path)]
    values, _ = resolve_settings(parser.parse_args([*base, "--convention", "find_,utils.py"]))
    assert values["convention"] == "find,utils"
    assert not resolve_settings(parser.parse_args(base))[0].get("convention")
    with pytest.raises(ConfigError):
        resolve_settings(parser.parse_args([*base, "--convention", "find"]))
