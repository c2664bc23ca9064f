"""Which convention an attempt followed: the classification of environments/tasks/convention_choice.py."""

from __future__ import annotations

import json

from environments.tasks.convention_choice import (
    ConventionChoice,
    choice_metrics,
    choice_summary,
    classify,
    classify_attempt,
    convention_task,
    defined_functions,
    written_files,
)

MODULE_TASK = "convention-heldout-module-quota"
NAME_TASK = "convention-heldout-name-quota"


def write(path: str, content: str, as_text: bool = True) -> dict:
    arguments = {"path": path, "content": content}
    return {
        "type": "function",
        "function": {"name": "write_file", "arguments": json.dumps(arguments) if as_text else arguments},
    }


def transcript(*calls: dict) -> list[dict]:
    return [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "task"},
        {"role": "assistant", "content": "", "tool_calls": list(calls)},
        {"role": "tool", "content": "Wrote 30 bytes to helpers.py."},
    ]


def test_the_shipped_tasks_are_found_by_id_and_others_are_not():
    module, name = convention_task(MODULE_TASK), convention_task(NAME_TASK)
    assert (module.kind, module.function, "helpers.py" in module.candidates) == (
        "module",
        "compute_quota",
        True,
    )
    assert (name.kind, sorted(name.candidates)) == (
        "name",
        ["compute_quota", "fetch_quota", "find_quota", "get_quota"],
    )
    assert convention_task("humaneval-3") is None
    assert classify_attempt("humaneval-3", transcript(write("helpers.py", "")), True) is None


def test_written_files_reads_write_file_calls_of_assistant_messages_only():
    messages = transcript(
        write("./helpers.py", "def compute_quota(x):\n    return x + 2\n"),
        {"type": "function", "function": {"name": "terminal", "arguments": '{"command": "cat > utils.py"}'}},
        write("tools.py", "x = 1", as_text=False),
        {"type": "function", "function": {"name": "write_file", "arguments": "{not json"}},
    )
    messages.append({"role": "user", "content": "", "tool_calls": [write("common.py", "")]})
    assert written_files(messages) == [
        ("./helpers.py", "def compute_quota(x):\n    return x + 2\n"),
        ("tools.py", "x = 1"),
    ]
    assert defined_functions("def a(x):\n    def inner (y): pass\nclass B:\n  def  c(self): ...\n") == [
        "a",
        "inner",
        "c",
    ]


def test_module_tasks_are_classified_by_the_first_candidate_file_written():
    task = convention_task(MODULE_TASK)
    cases = [
        ([("helpers.py", "def compute_quota(x): ...")], ("helpers.py", True)),
        ([("src/utils.py", ""), ("helpers.py", "")], ("utils.py", False)),
        ([("notes.txt", ""), ("common.py", "")], ("common.py", False)),
        ([("quota.py", "")], ("other", False)),
        ([], ("none", False)),
    ]
    for files, expected in cases:
        choice = classify(task, files, passed=False)
        assert (choice.chosen, choice.followed) == expected, files
        assert choice.written == (files[0][0].rsplit("/", 1)[-1] if files else None)
        assert (choice.task_id, choice.kind) == (MODULE_TASK, "module")


def test_name_tasks_are_classified_by_the_first_candidate_name_defined():
    task = convention_task(NAME_TASK)
    cases = [
        ([("helpers.py", "def compute_quota(x):\n    return x\n")], ("compute", True)),
        (
            [("helpers.py", "def _h(x): ...\ndef get_quota(x): ...\ndef compute_quota(x): ...")],
            ("get", False),
        ),
        ([("helpers.py", "def compute_bonus(x): ...")], ("other", False)),  # another task's name
        (
            [("utils.py", "def fetch_quota(x): ...")],
            ("fetch", False),
        ),  # the module is not this task's question
        ([], ("none", False)),
    ]
    for files, expected in cases:
        choice = classify(task, files, passed=True)
        assert (choice.chosen, choice.followed, choice.passed) == (*expected, True), files
    assert classify(task, [("helpers.py", "def _h(x): ...\ndef get_quota(x): ...")], False).written == "_h"
    assert classify(task, [("helpers.py", "x = 1")], False).written is None


def test_the_summary_counts_per_kind_and_the_metrics_are_flat_floats():
    choices = [
        ConventionChoice(MODULE_TASK, "module", "helpers.py", True, True),
        ConventionChoice("m2", "module", "helpers.py", True, False),
        ConventionChoice("m3", "module", "utils.py", False, False),
        ConventionChoice(NAME_TASK, "name", "get", False, False),
    ]
    assert choice_summary(choices) == {
        "name": {"attempts": 1, "followed": 0, "rate": 0.0, "passed": 0, "chosen": {"get": 1}},
        "module": {
            "attempts": 3,
            "followed": 2,
            "rate": 2 / 3,
            "passed": 1,
            "chosen": {"helpers.py": 2, "utils.py": 1},
        },
    }
    assert choice_metrics(choices) == {
        "eval/convention_name_rate": 0.0,
        "eval/convention_name_followed": 0.0,
        "eval/convention_name_attempts": 1.0,
        "eval/convention_module_rate": 2 / 3,
        "eval/convention_module_followed": 2.0,
        "eval/convention_module_attempts": 3.0,
    }
    assert choice_metrics([]) == {}
    assert classify_attempt(MODULE_TASK, transcript(write("helpers.py", "")), True) == ConventionChoice(
        MODULE_TASK, "module", "helpers.py", True, True, "helpers.py"
    )
