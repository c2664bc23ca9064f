"""Issue #41 item 10: `hermes-opd tasks score` answers bad input with exit 2 and ONE line that says what
was refused, or, where only some samples are refused, a score with one line per refused sample.
Run through the CLI's own entry point (`hermes_opd.commands.main`), as an operator types it."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys

import pytest

from environments.tasks.builtin import builtin_tasks
from hermes_opd.commands.main import COMMANDS
from hermes_opd.commands.main import main as cli

pytestmark = pytest.mark.reliability
PREFIX = "hermes-opd tasks score: "
GOOD = {
    "task_id": "fizzbuzz",
    "solution": {t.task_id: t for t in builtin_tasks()}["fizzbuzz"].reference_solution["solution.py"],
}
TASKS_JSONL = {"task_id": "t", "prompt": "p", "hidden_tests": "def test_t():\n    assert True\n"}


def write_lines(path, rows) -> str:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return str(path)


def refused_in_one_line(capsys, *args: str) -> str:
    """Run the command; it must exit 2 and print exactly one line (on stderr) and nothing else."""
    assert cli(["tasks", "score", *args]) == 2
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert out == "" and len(lines) == 1 and lines[0].startswith(PREFIX), (out, err)
    return lines[0].removeprefix(PREFIX)


@pytest.fixture()
def no_task_source_load(monkeypatch):
    """Fails the test if the task source is loaded (the input must be refused before)."""
    module = importlib.import_module(COMMANDS["tasks"].module)

    def refuse(*_args, **_kwargs):
        raise AssertionError("the task source was loaded")

    monkeypatch.setattr(module, "load_source", refuse)


# -- flags that do not fit: one line, nothing read -----------------------------------------------------


def test_a_split_of_a_source_without_splits_is_refused(tmp_path, capsys, no_task_source_load):
    samples = write_lines(tmp_path / "s.jsonl", [GOOD])
    line = refused_in_one_line(capsys, samples, "--task-split", "nosplit")
    assert (
        line
        == "--task-split 'nosplit': a builtin task source has no splits (--task-split names a split of an hf dataset)"
    )
    tasks = write_lines(tmp_path / "t.jsonl", [TASKS_JSONL])
    line = refused_in_one_line(capsys, samples, "--task-path", tasks, "--task-split", "test")
    assert line.startswith("--task-split 'test': a jsonl task source has no splits")


def test_train_stays_the_implied_split_of_every_source(tmp_path, capsys):
    samples = write_lines(tmp_path / "s.jsonl", [{"task_id": "t", "solution": ""}])
    tasks = write_lines(tmp_path / "t.jsonl", [TASKS_JSONL])
    assert cli(["tasks", "score", samples, "--task-path", tasks, "--task-split", "train"]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["passed"] == 1


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--task-path", ""], "--task-path is empty"),
        (
            ["--task-source", "builtin", "--task-path", "x.jsonl"],
            "--task-source builtin reads no --task-path",
        ),
        (["--task-source", "jsonl"], "--task-source jsonl needs --task-path"),
    ],
)
def test_task_source_flags_that_do_not_fit_together(tmp_path, capsys, no_task_source_load, flags, message):
    samples = write_lines(tmp_path / "s.jsonl", [GOOD])
    assert refused_in_one_line(capsys, samples, *flags).startswith(message)


def test_an_unknown_test_format_is_one_line(tmp_path, capsys):
    samples = write_lines(tmp_path / "s.jsonl", [GOOD])
    with pytest.raises(SystemExit) as exit_:
        cli(["tasks", "score", samples, "--task-test-format", "nope"])
    assert exit_.value.code == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1
    assert err.startswith(PREFIX + "argument --task-test-format: invalid choice: 'nope'"), err


@pytest.mark.parametrize("test_format", ["code", "stdio"])
def test_a_test_format_the_tasks_do_not_have_is_one_line_not_a_list(tmp_path, capsys, test_format):
    """Before: 26 lines, one per task directory; and with the builtin source the flag was ignored."""
    samples = write_lines(tmp_path / "s.jsonl", [GOOD])
    line = refused_in_one_line(capsys, samples, "--task-test-format", test_format)
    assert (
        line.startswith("25 record(s) of ")
        and f"do not fit with --task-test-format {test_format}; the first: " in line
    )


# -- the samples file as a whole ---------------------------------------------------------------------


def test_a_file_of_json_that_is_not_samples_is_one_line_before_the_tasks_load(
    tmp_path, capsys, no_task_source_load
):
    """Before: 4 lines, after the task source had loaded."""
    samples = write_lines(tmp_path / "s.jsonl", ["null", "[]", "42"])
    line = refused_in_one_line(capsys, samples)
    assert line == (
        f'{samples}: no usable samples: line 1: expected an object with a string "task_id", got null '
        "(and 2 more line(s) refused)"
    )


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("", "no usable samples (the file has no non-blank line)"),
        ("\n\n  \n", "no usable samples (the file has no non-blank line)"),
        ("\xff\xfe{}\n", "no usable samples: line 1: not valid UTF-8"),
        (
            '{"task_id": 7}\n',
            'no usable samples: line 1: expected an object with a string "task_id", got an object',
        ),
    ],
)
def test_a_samples_file_with_nothing_usable(tmp_path, capsys, no_task_source_load, content, message):
    path = tmp_path / "s.jsonl"
    path.write_bytes(content.encode("latin-1"))
    assert refused_in_one_line(capsys, str(path)).startswith(f"{path}: {message}")


def test_a_directory_or_a_missing_file_as_samples(tmp_path, capsys, no_task_source_load):
    assert refused_in_one_line(capsys, str(tmp_path)) == f"{tmp_path}: is a directory, not a samples file"
    assert refused_in_one_line(capsys, str(tmp_path / "none.jsonl")).startswith(
        f"{tmp_path / 'none.jsonl'}: cannot read"
    )


def test_an_unwritable_out_file_is_refused_before_anything_is_scored(tmp_path, capsys, monkeypatch):
    module = importlib.import_module(COMMANDS["tasks"].module)
    monkeypatch.setattr(module, "score_samples", None)  # scoring would fail loudly
    samples = write_lines(tmp_path / "s.jsonl", [GOOD])
    line = refused_in_one_line(capsys, samples, "--out", str(tmp_path))
    assert line.startswith(f"cannot write {tmp_path}: ")


# -- single samples refused: a score, and one line per refused sample ---------------------------------


def scored_with_refusals(capsys, *args: str) -> tuple[list[list[str]], dict, list[str]]:
    assert cli(["tasks", "score", *args]) == 2
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    ours = [line.removeprefix(PREFIX) for line in err.splitlines() if line.startswith(PREFIX)]
    lines = out.strip().splitlines()
    return [line.split("\t") for line in lines[:-1]], json.loads(lines[-1]), ours


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("a\x00b.py", "file name 'a\\x00b.py' contains a NUL byte"),
        ("", "file name '' is empty"),
        ("../../etc/evil.py", "file name '../../etc/evil.py' contains '..'"),
        ("line\nbreak.py", "file name 'line\\nbreak.py' contains a control character"),
    ],
)
def test_an_unusable_file_name_is_refused_in_one_line_and_scored_0(tmp_path, capsys, name, why):
    """Before: exit 0, the reason only inside a test's failure message."""
    bad = {"task_id": "fizzbuzz", "solution": {name: GOOD["solution"]}}
    rows, summary, ours = scored_with_refusals(capsys, write_lines(tmp_path / "s.jsonl", [bad, GOOD]))
    assert len(ours) == 1 and ours[0].startswith(f"{tmp_path / 's.jsonl'}:1: solution refused: {why}"), ours
    assert ours[0].endswith("; scored 0")
    assert [r[:3] for r in rows] == [["fizzbuzz", "REFUSED", "0/4"], ["fizzbuzz", "PASS", "4/4"]]
    assert rows[0][3].startswith("0.000  line 1: solution refused: file name") and rows[1][3] == "1.000"
    assert (summary["tasks"], summary["passed"], summary["refused_samples"], summary["unusable_lines"]) == (
        2,
        1,
        1,
        0,
    )
    assert not (tmp_path / "etc").exists() and not (tmp_path.parent / "etc" / "evil.py").exists()


def test_a_60_mb_solution_line_is_refused_in_one_line(tmp_path, capsys):
    """Before: exit 0, a score, and the sample's size named only inside a test's message."""
    path = tmp_path / "s.jsonl"
    write_lines(path, [{"task_id": "fizzbuzz", "solution": "x" * 60_000_000}])
    rows, summary, ours = scored_with_refusals(capsys, str(path))
    assert ours == [
        f"{path}:1: solution refused: the solution has 60000000 bytes; at most 16777216; scored 0"
    ]
    assert [r[1] for r in rows] == ["REFUSED"] and summary["refused_samples"] == 1


def test_the_installed_command_says_it_in_one_line(tmp_path):
    """The same through a fresh process, as typed: no traceback, no log wall."""
    samples = write_lines(tmp_path / "s.jsonl", [GOOD])
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "hermes_opd.commands.main",
            "tasks",
            "score",
            samples,
            "--task-split",
            "nosplit",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 2 and run.stdout == "", run
    assert run.stderr.strip().splitlines() == [
        PREFIX
        + "--task-split 'nosplit': a builtin task source has no splits (--task-split names a split of an hf dataset)"
    ]
