"""`hermes-opd demo` end to end on a small setting, against the session's dev server."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.integration
def test_demo_writes_valid_groups_metrics_and_a_report(dev_server, tmp_path):
    from hermes_opd.commands.validate_file import validate_jsonl

    out = tmp_path / "demo"
    out.mkdir()
    (out / "groups.jsonl").write_text("left over from an earlier run\n")  # the demo starts afresh
    argv = [
        sys.executable, "-m", "hermes_opd.commands.main", "demo", "--out", str(out), "--groups", "2",
        "--group-size", "2", "--max-turns", "2",
        "--server-url", dev_server.base_url, "--model-name", dev_server.model_name,
        "--model-dir", str(dev_server.model_dir),
    ]  # fmt: skip
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
