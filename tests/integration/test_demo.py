"""`hermes-opd demo` end to end: the learning demo (the default) on a reduced setting with its own
LoRA vLLM on the shipped copying student, and `--dev-model` against the session's dev server.
The tests of its parts that need no server: tests/unit/test_demo.py."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}


@pytest.mark.integration
def test_learning_demo_collects_trains_and_evaluates_before_and_after(tmp_path):
    """One OPD step instead of six, one group collected: the same code path as `bash scripts/demo.sh`."""
    from hermes_opd.commands.validate import validate_jsonl

    out = tmp_path / "demo"
    argv = [
        sys.executable,
        "-m",
        "hermes_opd.commands.main",
        "demo",
        "--out",
        str(out),
        "--groups",
        "1",
        "--steps",
        "1",
        "--eval-every",
        "1",
    ]
    proc = subprocess.run(
        argv, cwd=REPO, env={**os.environ, **OFFLINE}, capture_output=True, text=True, timeout=900
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-4000:]
    assert "Traceback" not in output
    for name in ("groups.jsonl", "report.html", "learning.png", "learning.json", "validation.json"):
        assert (out / name).is_file(), f"{name} not written:\n{proc.stdout}"
    validation = validate_jsonl(out / "groups.jsonl")
    assert validation.clean and validation.groups == 1 and validation.sequences == 4
    assert json.loads((out / "validation.json").read_text())["clean"] is True
    (run,) = json.loads((out / "learning.json").read_text())["runs"]
    assert run["arm"] == "opd" and len(run["steps"]) == 1 and [x for x, _ in run["curve"]] == [0, 8]
    # the copying student passes 5 of the 24 held-out tasks before training, in every measured run
    line = re.search(r"held-out success  before (\d+)/24  ->  after (\d+)/24", proc.stdout)
    assert line and line.group(1) == "5", proc.stdout
    assert int(line.group(2)) == round(run["curve"][1][1] * 24)
    # the judge's hints on the convention tasks name the function or the file the checker wants
    screen = " ".join(proc.stdout.split())  # the hints are wrapped over lines
    wanted = r'x "[^"]*(Define `compute_\w+` in `helpers.py`|Write the solution to `helpers.py`)'
    assert re.search(wanted, screen), proc.stdout
    assert 'class="hint"' in (out / "report.html").read_text()
    for label in ("at each step", "teacher gap", "checker feedback", "validator clean", "figure", "report"):
        assert label in proc.stdout, f"summary lacks {label!r}:\n{proc.stdout}"
    assert "waiting for vLLM" in proc.stdout, "the vLLM start said nothing while it waited"


@pytest.mark.integration
def test_dev_model_demo_writes_valid_groups_metrics_and_a_report(dev_server, tmp_path):
    from hermes_opd.commands.validate import validate_jsonl

    out = tmp_path / "demo"
    out.mkdir()
    (out / "groups.jsonl").write_text("left over from an earlier run\n")  # the demo starts afresh
    argv = [
        sys.executable,
        "-m",
        "hermes_opd.commands.main",
        "demo",
        "--dev-model",
        "--out",
        str(out),
        "--groups",
        "2",
        "--group-size",
        "2",
        "--max-turns",
        "2",
        "--policy-url",
        dev_server.base_url,
        "--model-name",
        dev_server.model_name,
        "--model-dir",
        str(dev_server.model_dir),
    ]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    proc = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=540)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-4000:]
    assert "Traceback" not in output

    groups, metrics, report = out / "groups.jsonl", out / "metrics.jsonl", out / "report.html"
    assert groups.exists() and metrics.exists() and report.exists()
    validation = validate_jsonl(groups)
    assert validation.clean, validation.to_dict()
    assert validation.groups == 2 and validation.sequences == 4
    assert validation.positions_scored > 0, "the teacher scored no token"
    html = report.read_text()
    assert 'class="tok scored' in html, "the report shows no scored token"
    assert metrics.read_text().count('"kind": "group"') == 2

    for label in (
        "groups ",
        "sequences",
        "scores",
        "hint rate",
        "tokens scored",
        "validator       clean",
        "report",
    ):
        assert label in proc.stdout, f"summary lacks {label!r}:\n{proc.stdout}"
    assert "vLLM: using" in proc.stdout and "vLLM: starting" not in proc.stdout
