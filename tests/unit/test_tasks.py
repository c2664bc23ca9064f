"""Tasks: the built-in set, the JSONL and Hugging Face loaders, and the train/eval split."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from environments.tasks.builtin import builtin_tasks
from environments.tasks.loaders import TaskLoadError, load_hf_tasks, load_jsonl_tasks
from environments.tasks.split import is_eval_task, split_bucket, split_tasks
from environments.tasks.suite_format import parse_suite
from environments.tasks.task import Task

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
    assert task.hidden_tests == {"kind": "code", "code": "from m import g\nassert g() == 1"}
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
    code = "from environments.tasks.split import split_bucket; print(repr(split_bucket('task-1')))"
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


# -- built-in tasks as data files, and data-style tests --------------------------------------


def test_builtin_tasks_are_package_data_read_by_the_user_loader():
    import tomllib
    from fnmatch import fnmatch

    from environments.tasks.builtin import DATA_DIR
    from environments.tasks.loaders import load_task_dirs

    assert load_task_dirs(DATA_DIR) == builtin_tasks()
    package = DATA_DIR.parents[1]
    assert not list((package / "tasks").glob("builtin_*.py"))  # no more string-literal modules
    patterns = tomllib.loads((package.parent / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-data"
    ]
    shipped = [p for p in DATA_DIR.rglob("*") if p.is_file() and "__pycache__" not in p.parts]
    assert len(shipped) == 1 + 4 * len(builtin_tasks())  # index.json + 4 files per task
    for path in shipped:
        relative = str(path.relative_to(DATA_DIR.parent))
        assert any(fnmatch(relative, pattern) for pattern in patterns["environments.tasks"]), relative
    for task in builtin_tasks():
        assert (DATA_DIR / task.task_id / "solution.py").read_text() == task.reference_solution["solution.py"]
        assert (DATA_DIR / task.task_id / "prompt.md").read_text() == task.prompt


def _write_task_dir(root: Path, task_id: str, tests: object) -> Path:
    directory = root / task_id
    directory.mkdir(parents=True)
    (directory / "task.json").write_text(json.dumps({"difficulty": "easy"}))
    (directory / "prompt.md").write_text("Write `double(x)`.")
    (directory / "tests.json").write_text(json.dumps(tests))
    (directory / "solution.py").write_text("def double(x):\n    return 2 * x\n")
    return directory


DOUBLE_TESTS = {
    "imports": ["double"],
    "tests": [
        {
            "name": "test_double",
            "checks": [{"expr": "double(2)", "returns": 4}, {"expr": "double(0)", "returns": 0}],
        }
    ],
}


def test_user_task_directories_load_like_the_builtin_ones(tmp_path, caplog):
    from environments.tasks.loaders import load_task_dirs

    _write_task_dir(tmp_path, "double", DOUBLE_TESTS)
    (task,) = load_task_dirs(tmp_path)
    assert (task.task_id, task.difficulty, task.prompt) == ("double", "easy", "Write `double(x)`.")
    assert task.data_tests and task.reference_solution == {
        "solution.py": "def double(x):\n    return 2 * x\n"
    }
    assert "FORGEABLE" not in caplog.text
    (tmp_path / "double" / "tests.json").write_text(
        json.dumps({"tests": [{"name": "t", "checks": [{"expr": "1 +"}]}]})
    )
    with pytest.raises(
        TaskLoadError, match=r"double: task 'double': hidden tests: test 't' check 0: does not compile"
    ):
        load_task_dirs(tmp_path)


def test_code_style_tests_load_as_code_suites_without_a_forgeable_path(tmp_path, caplog):
    code = write_jsonl(
        tmp_path / "code.jsonl",
        [{"task_id": f"c{i}", "prompt": "p", "hidden_tests": "assert True"} for i in range(3)],
    )
    data = write_jsonl(
        tmp_path / "data.jsonl", [{"task_id": "d", "prompt": "p", "hidden_tests": DOUBLE_TESTS}]
    )
    with caplog.at_level("WARNING"):
        tasks = load_jsonl_tasks(code)
        (data_task,) = load_jsonl_tasks(data)
    assert [t.hidden_tests for t in tasks] == [{"kind": "code", "code": "assert True"}] * 3
    assert [t.data_tests for t in tasks] == [False] * 3 and data_task.data_tests
    assert "FORGEABLE" not in caplog.text  # the in-interpreter runner is gone: nothing to warn about
    # A data suite stored as JSON text (e.g. a string column of a dataset) is data-style too.
    text = write_jsonl(
        tmp_path / "text.jsonl", [{"task_id": "t", "prompt": "p", "hidden_tests": json.dumps(DOUBLE_TESTS)}]
    )
    assert load_jsonl_tasks(text)[0].hidden_tests == DOUBLE_TESTS


def test_values_keep_exact_types_across_the_codec():
    from environments.tasks.suite_format import MalformedResult, decode_value, encode_value, same, strict_json

    samples = [
        1,
        True,
        1.0,
        None,
        "1",
        (1, [2, (3,)]),
        {"a": 1},
        {1: "x", (2, 3): [4]},
        {1, 2},
        frozenset({"a"}),
        b"\x00\xff",
        float("inf"),
        [float("nan")],
        {"$weird": 1},
    ]
    for value in samples:
        back = decode_value(strict_json(json.dumps(encode_value(value))))
        assert same(value, back) and type(back) is type(value), value
    assert not same(1, True) and not same(1, 1.0) and not same(True, 1) and not same((1, 2), [1, 2])
    assert not same({1: "a"}, {True: "a"}) and not same({1}, {1.0})
    assert same(1.75, 1.7500000001, tol=1e-6) and not same(1.75, 1.76, tol=1e-6)
    for bad in (
        '{"a": 1, "a": 2}',
        "[NaN]",
        '{"x": Infinity}',
        "[" * 100_000,
        '{"$tuple": 1}',
        '{"$nope": []}',
        '{"$set": [1, true]}',
        '{"$dict": [[1, 2], [1, 3]]}',
    ):
        with pytest.raises(MalformedResult):
            decode_value(strict_json(bad))


def test_the_child_encodes_exactly_like_the_parent():
    import environments.tasks.suite_child as child
    from environments.tasks.suite_format import canonical, encode_value, sha256_of

    for value in [{3, 1, 2}, {(1, "a"): {2.5}}, [None, True, b"x", frozenset({(1,), (0,)})], float("-inf")]:
        assert child.canonical_json(child.encode(value)) == canonical(value)
        assert child.digest(value) == sha256_of(value)
        assert child.encode(value) == encode_value(value) or isinstance(value, set | dict)
    with pytest.raises(TypeError):
        child.encode(type("Sub", (int,), {})(1))


def test_hugging_face_datasets_get_data_style_tests_too(tmp_path):
    """A dataset column holding the suite as JSON text (Arrow cannot type a free-form object)."""
    rows = [{"id": "d", "question": "Write `double(x)`.", "tests": json.dumps(DOUBLE_TESTS)}]
    path = write_jsonl(tmp_path / "hf.jsonl", rows)
    (task,) = load_hf_tasks(path, field_map={"task_id": "id", "prompt": "question", "hidden_tests": "tests"})
    assert task.data_tests and task.hidden_tests == DOUBLE_TESTS
