"""`hermes-opd process` without a server: the output file (whole lines, torn tails, resume bookkeeping)
and the command line's errors. Resume after SIGKILL and a clean Ctrl-C against the real dev server are in
tests/integration/test_process_job.py."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from environments.delivery.groups_file import GroupWriter, OutputError, scan_output
from hermes_opd.commands import process as process_job
from hermes_opd.commands.process import group_failure
from tests.support.process_job import LOCAL_CPU, REPO


def _group(n_seqs: int = 2, stop_reason: str = "final_answer") -> dict:
    return {
        "tokens": [[1, 2, 3]] * n_seqs,
        "masks": [[-100, 2, 3]] * n_seqs,
        "scores": [0.0] * n_seqs,
        "overrides": [{"stop_reason": stop_reason, "error": "ServerUnreachableError: down"}] * n_seqs,
    }


def test_writer_puts_index_and_task_first_and_scan_reads_them(tmp_path):
    path = tmp_path / "out" / "g.jsonl"
    writer = GroupWriter(path)
    writer.write(1, 'task "one"', _group())
    writer.write(0, "zero", {**_group(), "group_index": 99})  # ours wins
    writer.close()
    lines = path.read_bytes().splitlines()
    assert lines[0].startswith(b'{"group_index":1,"task_id":"task \\"one\\""')
    assert json.loads(lines[1])["group_index"] == 0
    existing = scan_output(path)
    assert existing.tasks == {1: 'task "one"', 0: "zero"}
    assert existing.lines == {1: 1, 0: 2}
    assert existing.truncated_bytes == 0


def test_scan_cuts_a_torn_last_line(tmp_path):
    path = tmp_path / "g.jsonl"
    writer = GroupWriter(path)
    writer.write(0, "a", _group())
    writer.close()
    whole = path.read_bytes()
    path.write_bytes(whole + b'{"group_index":1,"task_id":"b","tokens":[[1,2')
    existing = scan_output(path)
    assert existing.tasks == {0: "a"}
    assert existing.truncated_bytes > 0
    assert path.read_bytes() == whole
    # without repair the file is left alone
    path.write_bytes(whole + b'{"group_index":1')
    assert scan_output(path, repair=False).truncated_bytes == len(b'{"group_index":1')
    assert path.read_bytes().endswith(b'{"group_index":1')


def test_scan_refuses_files_it_did_not_write(tmp_path):
    path = tmp_path / "atropos.jsonl"
    foreign = json.dumps(_group()).encode() + b"\n"
    path.write_bytes(foreign)
    with pytest.raises(OutputError, match="line 1 is not a group written by"):
        scan_output(path)
    path.write_bytes(foreign + b'{"tokens": [[1')  # a torn line that is not ours is not cut either
    with pytest.raises(OutputError):
        scan_output(path)
    assert path.read_bytes() == foreign + b'{"tokens": [[1'
    path.write_bytes(b'{"group_index":0,"task_id":"a"}\n{"group_index":0,"task_id":"a"}\n')
    with pytest.raises(OutputError, match="appears twice"):
        scan_output(path)


def test_group_failure():
    assert group_failure(_group(2), 2) is None
    assert "expected group_size=4" in group_failure(_group(2), 4)
    assert "generation error" in group_failure(_group(2, "generation_error"), 2)
    assert group_failure(None, 2) == "collect_trajectories returned no group"


@pytest.mark.parametrize(
    "yaml_text, argv, message",
    [
        ("env:\n  group_size: [4\n", [], "not valid YAML (line"),
        (
            "env:\n  group_sise: 4\n",
            [],
            "env.group_sise: unknown key 'group_sise'; did you mean 'group_size'",
        ),
        ("env:\n  group_size: 4\n", ["--env.max_turnz", "2"], "--env.max_turnz: unknown key"),
        ("env:\n  group_size: 4\n", ["--bogus"], "unknown argument(s): --bogus"),
        ("env:\n  max_turns: 0\n", [], "env.max_turns: Input should be greater than or equal to 1"),
    ],
)
def test_config_errors_exit_2(tmp_path, capsys, yaml_text, argv, message):
    config = tmp_path / "job.yaml"
    config.write_text(yaml_text)
    code = process_job.main(["--config", str(config), "--out", str(tmp_path / "g.jsonl"), *argv])
    err = capsys.readouterr().err
    assert code == 2
    assert message in err
    assert "Traceback" not in err
    assert not (tmp_path / "g.jsonl").exists()


def test_preflight_failure_exits_2_with_one_line(tmp_path, capsys):
    """A server the preflight check rejects is a config error (the URL or the model name): exit 2,
    as Atropos' own CLI does for the same check, and nothing written."""
    out = tmp_path / "g.jsonl"
    code = process_job.main(
        ["--config", str(LOCAL_CPU), "--out", str(out), "--openai.base_url", "http://127.0.0.1:9/v1"]
    )
    err = capsys.readouterr().err
    assert code == 2, err
    assert (
        err.strip()
        .splitlines()[-1]
        .startswith(
            "hermes-opd process: preflight failed: the policy server at http://127.0.0.1:9/v1 (also the teacher "
            "server) is unreachable (ClientConnectorError: "
        )
    ), err
    assert "Traceback" not in err
    assert not out.exists()


def test_missing_config_file_exits_2(tmp_path, capsys):
    assert process_job.main(["--config", str(tmp_path / "missing.yaml")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_foreign_output_exits_2_before_any_work(tmp_path, capsys):
    out = tmp_path / "g.jsonl"
    out.write_text(json.dumps({"tokens": [[1]]}) + "\n")
    code = process_job.main(["--config", str(LOCAL_CPU), "--out", str(out), "--no-preflight"])
    assert code == 2
    assert "not a group written by `hermes-opd process`" in capsys.readouterr().err
    assert out.read_text() == json.dumps({"tokens": [[1]]}) + "\n"


def test_print_config_masks_keys(tmp_path, capsys):
    code = process_job.main(["--config", str(LOCAL_CPU), "--print-config", "--openai.api_key", "sk-secret"])
    out = capsys.readouterr().out
    assert code == 0
    assert "sk-secret" not in out and "api_key: '***'" in out
    assert "concurrency: 2" in out


def test_cli_entry_point_exit_code(tmp_path):
    config = tmp_path / "bad.yaml"
    config.write_text("openai:\n  base_url: http://127.0.0.1:1/v1\n  modle_name: x\n")
    proc = subprocess.run(
        [sys.executable, "-m", "hermes_opd.commands.main", "process", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
    )
    assert proc.returncode == 2, proc.stderr
    assert "openai.modle_name: unknown key 'modle_name'; did you mean 'model_name'" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_run_totals_sum_every_group_summary_count():
    from hermes_opd.commands.progress import GroupSummary, RunTotals

    totals = RunTotals()
    totals.add(
        GroupSummary(
            sequences=2,
            scores=[1.0, 0.0],
            turns=3,
            judged_turns=2,
            hints=1,
            scored_turns=1,
            tokens_scored=5,
            tokens_generated=9,
            tokens_total=20,
        )
    )
    totals.add(GroupSummary(sequences=1, scores=[0.5], turns=1, judged_turns=2, hints=2))
    assert totals.to_dict() == {
        "groups": 2,
        "sequences": 3,
        "mean_score": 0.5,
        "turns": 4,
        "judged_turns": 4,
        "hints": 3,
        "hint_rate": 0.75,
        "scored_turns": 1,
        "tokens_scored": 5,
        "tokens_generated": 9,
    }
    assert totals.scores == [1.0, 0.0, 0.5] and totals.tokens_total == 20
