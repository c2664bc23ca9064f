"""Loaders for the three shapes: HF datasets and JSONL with field maps, `task_source: dirs`, the
`auto` format, and one clear error per record that does not fit."""

from __future__ import annotations

import json

import pytest

from environments.rollout.verifier import verify
from environments.tasks.loaders import TaskLoadError, load_hf_tasks, load_jsonl_tasks, load_tasks
from environments.tasks.stdio_builtin import STDIO_DATA_DIR
from environments.tasks.suites import parse_tests

MBPP_LIKE = [
    {
        "id": 11,
        "text": "Write remove_occ(s, ch) that removes the first and last occurrence of ch from s.",
        "test_list": ['assert remove_occ("hello", "l") == "heo"', 'assert remove_occ("abcda", "a") == "bcd"'],
        "challenge_test_list": ['assert remove_occ("PHP", "P") == "H"'],
        "code": "def remove_occ(s, ch):\n    i = s.find(ch)\n    if i >= 0:\n        s = s[:i] + s[i + 1:]\n"
        "    j = s.rfind(ch)\n    if j >= 0:\n        s = s[:j] + s[j + 1:]\n    return s\n",
    }
]
MBPP_MAP = {
    "task_id": "id",
    "prompt": "text",
    "hidden_tests": "test_list",
    "public_tests": "challenge_test_list",
    "reference_solution": "code",
}


async def test_an_hf_dataset_of_assert_lines_loads_and_scores(tmp_path):
    datasets = pytest.importorskip("datasets")
    datasets.Dataset.from_list(MBPP_LIKE).save_to_disk(str(tmp_path / "mbpp"))
    (task,) = load_hf_tasks(tmp_path / "mbpp", field_map=MBPP_MAP, test_format="code")
    suite = parse_tests(task.hidden_tests)
    assert suite.names == ["test_assert_line_1", "test_assert_line_2", "test_assert_line_3"]
    assert suite.public == {"test_assert_line_1"} and suite.remote_names == ("remove_occ",)
    (tmp_path / "agent").mkdir()
    (tmp_path / "agent" / "solution.py").write_text(task.reference_solution["solution.py"])
    assert (await verify(task, tmp_path / "agent")).score == 1.0
    (tmp_path / "agent" / "solution.py").write_text(
        "def remove_occ(s, ch):\n    return s.replace(ch, '', 1)\n"
    )
    result = await verify(task, tmp_path / "agent")
    assert (result.passed, result.total) == (0, 3)
    assert "Hidden tests: 0/2 passed" in result.feedback  # counted, never described
    assert "test_assert_line_1: AssertionError (at: assert remove_occ('PHP', 'P') == 'H')" in result.feedback
    assert "heo" not in result.feedback and "bcd" not in result.feedback


def test_task_source_dirs_and_the_auto_format(tmp_path):
    stdio = load_tasks("dirs", STDIO_DATA_DIR)
    assert len(stdio) == 22 and all(t.hidden_tests["kind"] == "stdio" for t in stdio)
    rows = [
        {
            "task_id": "data",
            "prompt": "p",
            "hidden_tests": {"tests": [{"name": "t", "checks": [{"expr": "1", "returns": 1}]}]},
        },
        {"task_id": "code", "prompt": "p", "hidden_tests": ["assert f(1) == 2"]},
        {"task_id": "stdio", "prompt": "p", "hidden_tests": [{"input": "1", "output": "2"}]},
    ]
    path = tmp_path / "mixed.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    kinds = [type(parse_tests(t.hidden_tests)).__name__ for t in load_tasks("jsonl", path)]
    assert kinds == ["TestSuite", "CodeSuite", "StdioSuite"]


def test_every_record_that_does_not_fit_is_named_with_its_index(tmp_path):
    rows = [
        {"task_id": "ok", "prompt": "p", "hidden_tests": "assert f(1) == 2"},
        {"task_id": "bad-code", "prompt": "p", "hidden_tests": "assert f(1 == 2"},
        {
            "task_id": "bad-entry",
            "prompt": "p",
            "hidden_tests": "def check(c):\n    pass\n",
            "entry_point": "1x",
        },
        {"task_id": "no-tests", "prompt": "p"},
    ]
    path = tmp_path / "tasks.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(TaskLoadError) as info:
        load_jsonl_tasks(path, test_format="code")
    lines = str(info.value).split("\n")
    assert lines[0] == f"3 record(s) of {path} do not fit:"
    assert lines[1].startswith(f"- {path}:2: task 'bad-code': hidden tests: the test code does not parse")
    assert (
        lines[2]
        == f"- {path}:3: task 'bad-entry': hidden tests: code suite: entry_point must be a function name, got '1x'"
    )
    assert lines[3].startswith(f"- {path}:4: field 'hidden_tests' (for Task.hidden_tests) is missing")
