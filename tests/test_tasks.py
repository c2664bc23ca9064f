"""Tasks: the built-in set, the JSONL and Hugging Face loaders, and the train/eval split."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from environments.tasks import (
    Task,
    TaskLoadError,
    builtin_tasks,
    is_eval_task,
    load_hf_tasks,
    load_jsonl_tasks,
    split_bucket,
    split_tasks,
)
from environments.tasks.data_tests import parse_suite

ROWS = [
    {
        "id": f"t{i}",
        "question": f"Write f{i}.",
        "tests": f"from solution import f{i}\n\ndef test_it():\n    assert f{i}() == {i}\n",
        "level": "easy",
        "answer": f"def f{i}():\n    return {i}\n",
    }
    for i in range(5)
]
FIELD_MAP = {
    "task_id": "id",
    "prompt": "question",
    "hidden_tests": "tests",
    "difficulty": "level",
    "reference_solution": "answer",
}


def write_jsonl(path: Path, rows: list[object]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


# -- built-in tasks ---------------------------------------------------------------------------


def test_builtin_tasks_cover_a_range_of_difficulty():
    tasks = builtin_tasks()
    assert len(tasks) >= 20
    ids = [t.task_id for t in tasks]
    assert len(set(ids)) == len(ids)
    by_level = {level: sum(t.difficulty == level for t in tasks) for level in ("easy", "medium", "hard")}
    assert all(count >= 4 for count in by_level.values()), by_level
    for wanted in ("lru_cache", "merge_intervals", "tokenizer", "expression_evaluator"):
        assert wanted in ids


def test_builtin_tasks_are_complete():
    for task in builtin_tasks():
        assert task.solution_files == ("solution.py",)
        assert set(task.reference_solution) == {"solution.py"}
        assert "solution.py" in task.prompt
        assert task.data_tests, task.task_id
        names = parse_suite(task.hidden_tests).names
        assert len(names) >= 4, task.task_id
        compile(task.reference_solution["solution.py"], "solution.py", "exec")


def test_importing_tasks_does_not_import_datasets():
    code = "import environments.tasks, environments, sys; print('datasets' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# -- Task validation --------------------------------------------------------------------------


def test_task_validates_its_fields():
    with pytest.raises(ValueError, match="hidden_tests must be a non-empty string"):
        Task(task_id="a", prompt="p", hidden_tests="  ")
    with pytest.raises(ValueError, match="must be a relative path"):
        Task(task_id="a", prompt="p", hidden_tests="assert 1", solution_files=("../x.py",))
    with pytest.raises(ValueError, match="not in solution_files"):
        Task(task_id="a", prompt="p", hidden_tests="assert 1", reference_solution={"other.py": ""})
    assert Task(task_id="a", prompt="p", hidden_tests="assert 1", solution_files="m.py").solution_files == (
        "m.py",
    )


# -- JSONL loader -----------------------------------------------------------------------------


def test_load_jsonl_with_field_map(tmp_path):
    path = write_jsonl(tmp_path / "tasks.jsonl", ROWS)
    tasks = load_jsonl_tasks(path, FIELD_MAP)
    assert [t.task_id for t in tasks] == [f"t{i}" for i in range(5)]
    assert tasks[2].prompt == "Write f2."
    assert tasks[2].difficulty == "easy"
    assert tasks[2].reference_solution == {"solution.py": "def f2():\n    return 2\n"}


def test_load_jsonl_defaults_and_list_tests(tmp_path):
    row = {
        "task_id": 7,
        "prompt": "p",
        "hidden_tests": ["from m import g", "assert g() == 1"],
        "solution_files": "m.py",
    }
    (task,) = load_jsonl_tasks(write_jsonl(tmp_path / "t.jsonl", [row]))
    assert task.task_id == "7" and task.difficulty == "unknown" and task.reference_solution is None
    assert task.hidden_tests == "from m import g\nassert g() == 1"
    assert task.solution_files == ("m.py",)


def test_jsonl_missing_field_names_line_and_field(tmp_path):
    rows = [ROWS[0], {k: v for k, v in ROWS[1].items() if k != "tests"}]
    path = write_jsonl(tmp_path / "t.jsonl", rows)
    with pytest.raises(TaskLoadError) as info:
        load_jsonl_tasks(path, FIELD_MAP)
    message = str(info.value)
    assert f"{path}:2" in message
    assert "field 'tests' (for Task.hidden_tests) is missing" in message
    assert "'question'" in message  # lists what is there


def test_jsonl_explicitly_mapped_optional_field_must_exist(tmp_path):
    path = write_jsonl(tmp_path / "t.jsonl", [{k: v for k, v in ROWS[0].items() if k != "level"}])
    with pytest.raises(TaskLoadError, match="field 'level' \\(for Task.difficulty\\) is missing"):
        load_jsonl_tasks(path, FIELD_MAP)


def test_jsonl_errors(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n\n")
    with pytest.raises(TaskLoadError, match="no tasks found .* the dataset is empty"):
        load_jsonl_tasks(empty)
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(ROWS[0]) + "\n{oops\n")
    with pytest.raises(TaskLoadError, match="bad.jsonl:2: invalid JSON"):
        load_jsonl_tasks(bad, FIELD_MAP)
    with pytest.raises(TaskLoadError, match="does not exist"):
        load_jsonl_tasks(tmp_path / "missing.jsonl")
    with pytest.raises(TaskLoadError, match="not Task fields"):
        load_jsonl_tasks(bad, {"tests": "x"})
    dupes = write_jsonl(tmp_path / "dupes.jsonl", [ROWS[0], ROWS[0]])
    with pytest.raises(TaskLoadError, match="duplicate task_id 't0'"):
        load_jsonl_tasks(dupes, FIELD_MAP)
    not_object = write_jsonl(tmp_path / "list.jsonl", [[1, 2]])
    with pytest.raises(TaskLoadError, match="expected a JSON object"):
        load_jsonl_tasks(not_object)


# -- Hugging Face loader ----------------------------------------------------------------------


def test_load_hf_from_save_to_disk_dataset_and_dict(tmp_path):
    import datasets

    single = tmp_path / "single"
    datasets.Dataset.from_list(ROWS).save_to_disk(str(single))
    assert [t.task_id for t in load_hf_tasks(single, "train", FIELD_MAP)] == [r["id"] for r in ROWS]

    both = tmp_path / "both"
    datasets.DatasetDict(
        {"train": datasets.Dataset.from_list(ROWS[:3]), "test": datasets.Dataset.from_list(ROWS[3:])}
    ).save_to_disk(str(both))
    assert [t.task_id for t in load_hf_tasks(both, "test", FIELD_MAP)] == ["t3", "t4"]
    with pytest.raises(TaskLoadError, match=r"no split 'validation'; available splits: \['test', 'train'\]"):
        load_hf_tasks(both, "validation", FIELD_MAP)


def test_load_hf_from_local_json_file(tmp_path):
    path = write_jsonl(tmp_path / "rows.jsonl", ROWS)
    tasks = load_hf_tasks(path, "train", FIELD_MAP)
    assert [t.task_id for t in tasks] == [r["id"] for r in ROWS]
    assert tasks[0].reference_solution == {"solution.py": ROWS[0]["answer"]}


def test_load_hf_errors(tmp_path):
    import datasets

    empty = tmp_path / "empty"
    datasets.Dataset.from_list(ROWS).filter(lambda row: False).save_to_disk(str(empty))
    with pytest.raises(TaskLoadError, match=r"no tasks found in .*empty\[train\]: the dataset is empty"):
        load_hf_tasks(empty, "train", FIELD_MAP)
    empty_file = tmp_path / "empty.jsonl"
    empty_file.write_text("")
    with pytest.raises(TaskLoadError, match="could not load dataset .*empty.jsonl"):
        load_hf_tasks(empty_file, "train", FIELD_MAP)
    wrong = tmp_path / "wrong"
    datasets.Dataset.from_list([{"id": "a", "question": "q"}]).save_to_disk(str(wrong))
    with pytest.raises(TaskLoadError, match=r"row 0: field 'tests' \(for Task.hidden_tests\) is missing"):
        load_hf_tasks(wrong, "train", FIELD_MAP)
    text_file = tmp_path / "tasks.txt"
    text_file.write_text("x")
    with pytest.raises(TaskLoadError, match="unsupported file type '.txt'"):
        load_hf_tasks(text_file, "train")


# -- split ------------------------------------------------------------------------------------


def make_tasks(n: int) -> list[Task]:
    return [Task(task_id=f"task-{i}", prompt="p", hidden_tests="assert True") for i in range(n)]


def test_split_is_deterministic_and_order_independent():
    tasks = make_tasks(400)
    train, evals = split_tasks(tasks, eval_fraction=0.2)
    shuffled = tasks[:]
    random.Random(0).shuffle(shuffled)
    train2, evals2 = split_tasks(shuffled, eval_fraction=0.2)
    assert {t.task_id for t in evals} == {t.task_id for t in evals2}
    assert len(train) + len(evals) == 400
    assert 50 <= len(evals) <= 110  # about 20%
    assert all(is_eval_task(t.task_id, 0.2) for t in evals)
    assert not any(is_eval_task(t.task_id, 0.2) for t in train)
    # A task's side never depends on which other tasks are present.
    _, evals_subset = split_tasks(tasks[:200], eval_fraction=0.2)
    assert {t.task_id for t in evals_subset} == {
        t.task_id for t in evals if int(t.task_id.split("-")[1]) < 200
    }


def test_split_bucket_is_stable_across_processes_and_salted():
    code = "from environments.tasks import split_bucket; print(repr(split_bucket('task-1')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert float(out.stdout) == split_bucket("task-1")
    assert 0.0 <= split_bucket("task-1") < 1.0
    assert split_bucket("task-1", salt="other") != split_bucket("task-1")


def test_split_edges():
    tasks = make_tasks(3)
    assert split_tasks(tasks, 0.0) == (tasks, [])
    assert split_tasks(tasks, 1.0) == ([], tasks)
    train, evals = split_tasks(tasks, 0.0001)
    assert len(evals) == 1 and len(train) == 2  # small fraction still gives an eval task
    train, evals = split_tasks(tasks, 0.9999)
    assert len(train) == 1 and len(evals) == 2
    with pytest.raises(ValueError, match="eval_fraction must be in"):
        split_tasks(tasks, 1.5)
