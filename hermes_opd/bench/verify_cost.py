"""What `verify()` costs on the built-in tasks now, against a baseline verifier from git, in one run.

    python -m hermes_opd.bench.verify_cost --baseline ba45892 --repeat 3

The baseline is the verifier (and the child it runs) as it was at the given commit (then
`environments/verifier.py`), loaded from `git show` as a module of its own next to today's (both use
today's sandbox: its imports are mapped to the modules' current names). For every built-in
task, its reference solution and a wrong one (an empty file) are verified by both, alternating
which goes first, `--repeat` times. Prints per-verifier totals and, last, one JSON object whose
last key is the ratio (today / baseline; below 1 is faster).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType

from environments.rollout import verifier as current
from environments.tasks.builtin import builtin_tasks

REPO = Path(current.__file__).resolve().parents[2]
BASELINE_PATHS = ("environments/verifier.py", "environments/verifier_child.py")
"""Where the verifier and its child lived before the floors (since then: environments/rollout/)."""
MOVED_MODULES = {
    "environments.sandbox": "environments.rollout.sandbox.sandbox",
    "environments.sandbox_limits": "environments.rollout.sandbox.limits",
    "environments.tasks.data_tests": "environments.tasks.suite_format",
    "environments.tools": "environments.rollout.tools",
    "environments.verifier_child": "environments.tasks.suite_child",
}
"""The baseline's imports under today's module names."""


def _git_show(ref: str, path: str) -> str:
    command = ["git", "-C", str(REPO), "show", f"{ref}:{path}"]
    return subprocess.run(command, check=True, capture_output=True, text=True).stdout


def load_baseline(ref: str, directory: Path) -> ModuleType:
    """The verifier at `ref`, with the child it read next to its file (also at `ref`)."""
    source = _git_show(ref, BASELINE_PATHS[0])
    for old, new in MOVED_MODULES.items():
        source = re.sub(rf"^from {re.escape(old)} import", f"from {new} import", source, flags=re.M)
    (directory / "verifier.py").write_text(source)
    (directory / "verifier_child.py").write_text(_git_show(ref, BASELINE_PATHS[1]))
    spec = importlib.util.spec_from_file_location(
        "environments._verifier_baseline", directory / "verifier.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


async def measure(baseline: ModuleType, repeat: int) -> dict[str, float]:
    tasks = builtin_tasks()
    totals = {"baseline_s": [], "current_s": []}
    with tempfile.TemporaryDirectory() as tmp:
        for round_ in range(repeat):
            spent = {"baseline_s": 0.0, "current_s": 0.0}
            for i, task in enumerate(tasks):
                for source in (task.reference_solution["solution.py"], ""):
                    (Path(tmp) / "solution.py").write_text(source)
                    order = [("baseline_s", baseline), ("current_s", current)]
                    if (i + round_) % 2:
                        order.reverse()
                    for key, module in order:
                        started = time.perf_counter()
                        await module.verify(task, Path(tmp))
                        spent[key] += time.perf_counter() - started
            for key, value in spent.items():
                totals[key].append(value)
    baseline_s = statistics.median(totals["baseline_s"])
    current_s = statistics.median(totals["current_s"])
    return {
        "tasks": len(tasks),
        "verifications_per_round": 2 * len(tasks),
        "repeat": repeat,
        "baseline_s": round(baseline_s, 3),
        "current_s": round(current_s, 3),
        "ratio": round(current_s / baseline_s, 3),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hermes_opd.bench.verify_cost", description=__doc__)
    parser.add_argument("--baseline", default="ba45892", help="git commit of the baseline verifier")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        result = asyncio.run(measure(load_baseline(args.baseline, Path(tmp)), args.repeat))
    print(f"baseline {result['baseline_s']} s, current {result['current_s']} s per round (median)")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
