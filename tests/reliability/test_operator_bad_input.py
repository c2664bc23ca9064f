"""Issue 31: every bad input of the operator commands (`tasks score`, `validate`, `send`, `inspect`,
`process`) meets one clear line and exit code 2, never a traceback, and a bad line does not stop
the lines after it; a sample's file names never write outside its scratch directory. Each case
failed on the code before the fix (a traceback, exit 1, a file written outside, or a silent
acceptance)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

import pytest

from environments.tasks.builtin import builtin_tasks
from environments.tasks.loaders import TaskLoadError, load_hf_tasks, load_jsonl_tasks
from hermes_opd.commands import inspect as inspector
from hermes_opd.commands import send as send_groups
from hermes_opd.commands import tasks_score
from hermes_opd.commands import validate as validate_file
from tests.support.groups import build_group

pytestmark = pytest.mark.reliability
TASKS = {t.task_id: t for t in builtin_tasks()}
GOOD = {"task_id": "fizzbuzz", "solution": TASKS["fizzbuzz"].reference_solution["solution.py"]}
DEEP = "[" * 100_000 + "]" * 100_000


def write_lines(path, lines) -> str:
    path.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines))
    return str(path)


def one_line(err: str) -> str:
    lines = [line for line in err.strip().splitlines() if line]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


# -- tasks score: samples ----------------------------------------------------------------------------


def test_a_deeply_nested_samples_line_is_named_and_the_other_lines_are_still_scored(tmp_path, capsys):
    samples = write_lines(tmp_path / "s.jsonl", [GOOD, DEEP, '{"task_id": 1e999}', GOOD])
    assert tasks_score.main(["score", samples]) == 2
    out, err = capsys.readouterr()
    assert "s.jsonl:2: invalid JSON: nested more than 64 levels deep" in err
    assert "s.jsonl:3: invalid JSON: the number 1e999 is out of range" in err
    assert [line.split("\t")[:2] for line in out.strip().splitlines()[:-1]] == [["fizzbuzz", "PASS"]] * 2
    assert json.loads(out.strip().splitlines()[-1])["unusable_lines"] == 2


@pytest.fixture()
def scratch(tmp_path, monkeypatch):
    """Scratch directories under tmp_path/scratch, so that `../../x` lands in tmp_path."""
    (tmp_path / "scratch").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "scratch"))
    return tmp_path


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("ABS", "is absolute"),
        ("../../escaped.py", "contains '..'"),
        ("pkg/../../../escaped.py", "contains '..'"),
        ("a\x00b.py", "contains a NUL byte"),
        ("", "is empty"),
        (".test-output", "is reserved"),
        ("pkg/", "empty or '.' component"),
    ],
)
def test_a_sample_file_name_that_breaks_the_rule_fails_that_sample_only(scratch, capsys, name, why):
    outside = scratch / "outside" / "escaped.py"
    name = str(outside) if name == "ABS" else name
    bad = {"task_id": "fizzbuzz", "solution": {"solution.py": GOOD["solution"], name: "import os\n"}}
    samples = write_lines(scratch / "s.jsonl", [GOOD, bad, GOOD])
    verdicts = scratch / "v.jsonl"
    assert tasks_score.main(["score", samples, "--out", str(verdicts)]) == 2
    out, err = capsys.readouterr()
    line = one_line(err)  # the refused sample, on its own line; the others are scored
    assert line.startswith("hermes-opd tasks score: ") and "s.jsonl:2: solution refused: file name" in line
    assert why in line and line.endswith("; scored 0"), line
    rows = [line.split("\t") for line in out.strip().splitlines()[:-1]]
    assert [r[1] for r in rows] == ["PASS", "REFUSED", "PASS"]
    assert json.loads(out.strip().splitlines()[-1])["refused_samples"] == 1
    records = [json.loads(v) for v in verdicts.read_text().splitlines()]
    assert [r["line"] for r in records] == [1, 2, 3]
    message = records[1]["tests"][0]["message"]
    assert message.startswith("line 2: solution refused: file name") and why in message, message
    assert not outside.exists() and not (scratch / "escaped.py").exists()
    assert sorted(p.name for p in scratch.iterdir()) == ["s.jsonl", "scratch", "v.jsonl"]


# -- tasks score: task sources and flags -------------------------------------------------------------


def test_a_nested_task_source_is_one_error_naming_its_line(tmp_path):
    path = tmp_path / "tasks.jsonl"
    good = {"task_id": "t", "prompt": "p", "hidden_tests": "def test_t():\n    assert True\n"}
    path.write_text(
        json.dumps(good) + "\n" + '{"task_id": "d", "prompt": "p", "hidden_tests": ' + DEEP + "}\n"
    )
    with pytest.raises(
        TaskLoadError, match=r"tasks\.jsonl:2: invalid JSON \(nested more than 256 levels deep\)"
    ):
        load_jsonl_tasks(path)
    deep_text = {"task_id": "s", "prompt": "p", "hidden_tests": '{"tests": ' + "[" * 5000 + "]" * 5000 + "}"}
    path.write_text(json.dumps(deep_text) + "\n")
    with pytest.raises(TaskLoadError, match=r"tasks\.jsonl:1: "):
        load_jsonl_tasks(path)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--task-field-map", "[1, 2]"], "--task-field-map must be a JSON object of strings"),
        (
            ["--task-field-map", '{"hidden_tests": {"a": "b"}}'],
            "--task-field-map must be a JSON object of strings",
        ),
        (["--task-field-map", '{"hidden_tests": ' * 100 + "1" + "}" * 100], "nested more than 64"),
        (["--task-field-map", '{"nope": "x"}'], "field_map has keys ['nope']"),
    ],
)
def test_a_bad_field_map_is_one_line_and_exit_2(tmp_path, capsys, flags, message):
    tasks = write_lines(tmp_path / "t.jsonl", [{"task_id": "t", "prompt": "p", "hidden_tests": "x = 1\n"}])
    samples = write_lines(tmp_path / "s.jsonl", [GOOD])
    assert tasks_score.main(["score", samples, "--task-path", tasks, *flags]) == 2
    assert message in one_line(capsys.readouterr().err)


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("--per-test-timeout", "0", "must be in (0, 3600], got 0"),
        ("--per-test-timeout", "nan", "must be in (0, 3600], got nan"),
        ("--per-test-timeout", "inf", "must be in (0, 3600], got inf"),
        ("--per-test-timeout", "-1", "must be in (0, 3600], got -1"),
        ("--public-fraction", "2", "must be in [0, 1], got 2"),
        ("--public-fraction", "nan", "must be in [0, 1], got nan"),
        ("--workers", "0", "must be in [1, 64], got 0"),
        ("--workers", "-5", "must be in [1, 64], got -5"),
        ("--workers", "two", "'two' is not an integer"),
    ],
)
def test_a_bad_flag_is_one_line_and_exit_2(tmp_path, capsys, flag, value, message):
    samples = write_lines(tmp_path / "s.jsonl", [GOOD])
    with pytest.raises(SystemExit) as exit_:
        tasks_score.main(["score", samples, flag, value])
    assert exit_.value.code == 2
    line = one_line(capsys.readouterr().err)
    assert line.startswith(f"hermes-opd tasks score: argument {flag}: {message}"), line


def test_a_missing_dataset_fails_in_one_line():
    for name in ("no-such-dataset-xyz", "/nowhere/data.parquet", "./missing.jsonl.gz"):
        with pytest.raises(TaskLoadError) as error:
            load_hf_tasks(name)
        assert "\n" not in str(error.value) and name in str(error.value)


def test_an_unreachable_hub_is_not_retried_for_half_a_minute(tmp_path):
    samples = write_lines(tmp_path / "s.jsonl", [GOOD])
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")}
    env["HF_ENDPOINT"] = "http://127.0.0.1:9"  # nothing listens there
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "hermes_opd.commands.main",
            "tasks",
            "score",
            samples,
            "--task-path",
            "no-such-xyz",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert run.returncode == 2 and "Traceback" not in run.stderr, run.stderr
    assert "Retrying" not in run.stderr, run.stderr  # before: 5 retries with back-off, 23 lines, 29 s
    ours = [line for line in run.stderr.splitlines() if line.startswith("hermes-opd tasks score:")]
    assert len(ours) == 1 and "could not load dataset 'no-such-xyz'" in ours[0], run.stderr
    assert "the Hugging Face hub is unreachable" in ours[0]


def test_the_command_prints_no_traceback_for_a_bad_line_and_a_bad_name(scratch):
    samples = write_lines(
        scratch / "s.jsonl", [DEEP, {"task_id": "fizzbuzz", "solution": {"../../escaped.py": "x"}}, GOOD]
    )
    env = {**os.environ, "TMPDIR": str(scratch / "scratch")}
    run = subprocess.run(
        [sys.executable, "-m", "hermes_opd.commands.main", "tasks", "score", samples],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert run.returncode == 2 and "Traceback" not in run.stderr, run.stderr
    ours = [line for line in run.stderr.splitlines() if line.startswith("hermes-opd tasks score:")]
    assert len(ours) == 2 and ours[0].endswith("s.jsonl:1: invalid JSON: nested more than 64 levels deep"), (
        ours
    )
    assert "s.jsonl:2: solution refused: file name '../../escaped.py' contains '..'" in ours[1], ours
    assert [line.split("\t")[1] for line in run.stdout.strip().splitlines()[:-1]] == ["REFUSED", "PASS"]
    assert not (scratch / "escaped.py").exists()


# -- validate, send, inspect, process ----------------------------------------------------------------


def test_validate_names_a_nested_line_and_a_huge_integer_and_goes_on(tmp_path, capsys):
    path = write_lines(
        tmp_path / "g.jsonl", [build_group(seed=0), DEEP, "[" + "9" * 100_000 + "]", build_group(seed=1)]
    )
    assert validate_file.main([path]) == 2
    out, err = capsys.readouterr()
    assert json.loads(out)["groups"] == 2 and "Traceback" not in err
    assert "line 2: invalid JSON: nested more than 64 levels deep" in err
    assert "line 3: invalid JSON: Exceeds the limit (4300 digits)" in err


def test_validate_refuses_a_giant_group_as_a_whole(tmp_path, capsys):
    path = write_lines(tmp_path / "g.jsonl", [{"tokens": [[1]] * 5000}])
    assert validate_file.main([path]) == 1
    summary = json.loads(capsys.readouterr().out)
    assert [v["message"] for v in summary["first_violations"]] == [
        "the group has 5000 sequences; at most 4096 are allowed"
    ]


def test_validate_calls_an_empty_file_unusable(tmp_path, capsys):
    for text in ("", "\n\n  \n"):
        (tmp_path / "e.jsonl").write_text(text)
        assert validate_file.main([str(tmp_path / "e.jsonl")]) == 2
        out, err = capsys.readouterr()
        assert json.loads(out)["empty"] is True
        assert one_line(err).endswith("no groups: the file is empty (or holds only blank lines)")


def test_send_checks_the_file_before_it_contacts_the_api(tmp_path, capsys):
    path = write_lines(tmp_path / "g.jsonl", [build_group(seed=0), "{not json", DEEP])
    # Nothing listens on port 9: a send that contacted the API first would wait, then exit 1.
    assert send_groups.main([path, "--atropos-url", "http://127.0.0.1:9", "--give-up-after", "1"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert (
        "g.jsonl: line 2: invalid JSON" in err and "g.jsonl: line 3: invalid JSON: nested more than 64" in err
    )
    assert err.strip().endswith(
        "2 line(s) of " + path + " are not valid groups; nothing was sent. Fix or "
        "remove them, or rerun with --skip-invalid"
    )
    (tmp_path / "e.jsonl").write_text("")
    assert send_groups.main([str(tmp_path / "e.jsonl"), "--atropos-url", "http://127.0.0.1:9"]) == 2
    assert one_line(capsys.readouterr().err).endswith(
        "no groups: the file is empty (or holds only blank lines)"
    )


def test_inspect_skips_a_nested_line_and_refuses_zero_groups(tmp_path, capsys):
    path = write_lines(tmp_path / "g.jsonl", [build_group(seed=0), DEEP, {"tokens": 5}])
    out = tmp_path / "r.html"
    assert inspector.main([path, "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert "skipping line 2: invalid JSON: nested more than 64 levels deep" in err and "Traceback" not in err
    assert out.exists()
    with pytest.raises(SystemExit) as exit_:
        inspector.main([path, "--out", str(out), "--max-groups", "0"])
    assert exit_.value.code == 2
    assert "argument --max-groups: must be in [1," in one_line(capsys.readouterr().err)


def test_process_refuses_zero_concurrency(capsys):
    from hermes_opd.commands import process as process_job

    assert process_job.main(["--concurrency", "0", "--groups", "1"]) == 2
    assert "--concurrency must be >= 1 (got 0)" in capsys.readouterr().err
