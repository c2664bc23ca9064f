"""Which records `python -m hermes_opd.learning_study.proof PATH` judges (hermes_opd/learning_study/proof.py):
a bench's learning.json, a live bench's live.json, the JSON file itself, or, before either summary is
written, the finished runs' `<arm>-seed<N>/run.json`."""

from __future__ import annotations

import json

from hermes_opd.learning_study.proof import main


def evaluation(passed: int, module: int, name: int) -> dict:
    return {
        "eval/pass@1": passed / 24,
        "eval/tasks": 24.0,
        "conventions": {
            "module": {"attempts": 12, "followed": module},
            "name": {"attempts": 12, "followed": name},
        },
    }


def live_run(end: tuple[int, int, int]) -> dict:
    return {"arm": "opd", "seed": 3, "evals": [evaluation(5, 6, 0), evaluation(*end)], "rounds": [{}]}


def test_a_directory_with_only_live_json_is_judged_with_the_live_margin(tmp_path, capsys):
    (tmp_path / "live.json").write_text(json.dumps({"runs": [live_run((6, 7, 0))]}))
    assert main([str(tmp_path)]) == 0
    assert main([str(tmp_path / "live.json")]) == 0
    out = capsys.readouterr()
    assert "learning.json" not in out.err
    lines = out.out.splitlines()
    assert len(lines) == 2 and all(line.endswith(": PASS") for line in lines)  # module +1: the live margin


def test_finished_runs_are_judged_before_any_summary_is_written(tmp_path, capsys):
    live_dir, bench_dir = tmp_path / "live", tmp_path / "bench"
    (live_dir / "opd-seed3").mkdir(parents=True)
    (live_dir / "opd-seed3" / "run.json").write_text(json.dumps(live_run((6, 7, 0))))
    (bench_dir / "opd-seed0").mkdir(parents=True)
    (bench_dir / "opd-seed0" / "run.json").write_text(
        json.dumps(
            {
                "arm": "opd",
                "seed": 0,
                "start_eval": evaluation(5, 6, 0),
                "evals": [evaluation(7, 8, 1)],
                "probe": {},
            }
        )
    )
    assert main([str(live_dir), str(bench_dir)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].endswith(": PASS")  # live margin 1
    assert "passed 5->7" in lines[1] and "module 6->8" in lines[1] and lines[1].endswith(": PASS")


def test_a_directory_with_no_records_says_so(tmp_path, capsys):
    assert main([str(tmp_path)]) == 2
    assert "no learning.json, live.json or finished run" in capsys.readouterr().err
