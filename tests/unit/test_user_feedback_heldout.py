"""Issue #43, measured: the lexical reader on 40 plain-English replies it was NOT written from
(judge/eval/user_feedback_heldout.jsonl, 20 acceptances and 20 corrections, written before the
reader), through `python -m judge.eval.user_feedback_score`; and what the rules judges do with them."""

from __future__ import annotations

import subprocess
import sys

from judge.config import JudgeConfig
from judge.eval.user_feedback_score import DEFAULT_DATA, load_rows, main
from judge.prm_rules_backend import process_verdict
from judge.rules_backend import RulePatterns, pair_hint
from tests.support.judge_pairs import pair_with, tool

QUOTING = RulePatterns.from_config(JudgeConfig(backend="rules", rules_quote_user_feedback=True))
ROWS = load_rows(DEFAULT_DATA)
OLD_READER = """
import re
REDO = re.compile(r"(?i)\\b(?:try again|redo)\\b")
def asks_for_redo(t): return REDO.search(t) is not None
def corrects(t): return re.search(r"(?i)\\bwrong\\b", t) is not None
def accepts(t): return re.search(r"(?i)\\bthanks?\\b", t) is not None
"""


def test_the_set_is_20_acceptances_and_20_corrections():
    assert len(ROWS) == 40 and sum(label == "accept" for _, label in ROWS) == 20


def test_the_reader_reads_at_least_39_of_40(capsys):
    assert main([]) == 0
    line = capsys.readouterr().out.strip().splitlines()[-1]
    right = int(line.split("/")[0])
    assert right >= 39, line


def test_no_acceptance_becomes_a_hint_or_a_penalty_and_every_correction_is_quoted():
    for text, label in ROWS:
        pair = pair_with(tool("wrote 40 bytes to main.py", "write_file"), {"role": "user", "content": text})
        hint = pair_hint(pair, QUOTING)
        score = process_verdict(pair, QUOTING)[0]
        if label == "accept":
            assert hint is None and score >= 0, text  # at worst unread: 0, never quoted
        else:
            assert hint is not None and text.split()[0] in hint and score == -1, text


def test_another_reader_module_is_scored_with_its_own_api(tmp_path):
    reader = tmp_path / "old.py"
    reader.write_text(OLD_READER)
    run = subprocess.run(
        [sys.executable, "-m", "judge.eval.user_feedback_score", "--reader", str(reader)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0 and run.stdout.strip().endswith(")"), run
    assert run.stdout.startswith("1/40 read right (acceptances 0/20, corrections 1/20, unread 39)"), (
        run.stdout
    )


def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "ok", "label": "maybe"}\n')
    assert main(["--data", str(bad)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.endswith('bad.jsonl:1: expected {"text": str, "label": "accept"|"correct"}')
    assert main(["--reader", str(tmp_path / "none.py")]) == 2
    assert capsys.readouterr().err.strip().endswith("none.py: not a Python file")
