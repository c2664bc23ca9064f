"""`hermes-opd bench learning`: from the records of finished runs to curves, stage timings, the
summary table and the headline (pure logic; the runs: loop.py, the figure: plot.py).

A run is one (arm, seed). Its records are the trainer's metrics lines (one per optimizer step) and
the env's metrics lines (one per group, one per evaluation). Held-out success is the env's own
`eval/pass@1`; an evaluation's x value is the generations that trained the weights it evaluated:
`policy_version * generations_per_step`.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from hermes_opd.contract.policy_version import POLICY_VERSION_KEY

ARMS: dict[str, tuple[float, float]] = {"grpo": (1.0, 0.0), "opd": (0.0, 1.0), "hybrid": (1.0, 1.0)}
"""Arm -> (w_grpo, w_opd): GRPO only, OPD only, both."""

STEP_KEYS = (
    "loss/total",
    "loss/grpo",
    "loss/opd",
    "grad_norm",
    "grpo/ratio_capped_frac",
    "grpo/clip_frac",
    "opd/reverse_kl",
    "batch/score_mean",
    "batch/teacher_coverage",
    "optim/step_skipped",
    "policy/lag_mean",
    "policy/lag_max",
    "policy/stale_groups_dropped",
    "policy/stale_groups_dropped_total",
    "step_time_s",
    "time/checkpoint_and_sync_s",
    "time/batch_wait_s",
)
"""Trainer metrics kept per step in the JSON (the rest stay in the run's own metrics file), and the
lag distribution (`policy/lag_<k>_groups`, trainer_adapters/policy_lag.py)."""


def _kept(step: dict[str, Any]) -> dict[str, Any]:
    return {
        key: value
        for key, value in step.items()
        if key in STEP_KEYS or (key.startswith("policy/lag_") and key.endswith("_groups"))
    }


@dataclass
class RunRecords:
    arm: str
    seed: int
    generations_per_step: int
    trainer_steps: list[dict[str, Any]] = field(default_factory=list)
    env_groups: list[dict[str, Any]] = field(default_factory=list)
    evals: list[dict[str, Any]] = field(default_factory=list)
    """Each with `policy_version` and `eval/pass@1` (the env's evaluate, run by the bench)."""
    probe: dict[str, Any] = field(default_factory=dict)
    """probe.probe_run: the teacher gap on the first groups, start and end."""


def eval_curve(run: RunRecords) -> list[tuple[int, float]]:
    """(generations, held-out pass@1) per evaluated policy version, in order; a version evaluated
    twice (in a run of an earlier bench: the serve loop's and the final one) keeps the later result."""
    by_version: dict[int, float] = {}
    for record in run.evals:
        by_version[int(record[POLICY_VERSION_KEY])] = float(record["eval/pass@1"])
    return [(version * run.generations_per_step, by_version[version]) for version in sorted(by_version)]


def equal_score_share(groups: Iterable[dict[str, Any]]) -> float | None:
    """Share of groups whose rollouts all scored the same (no GRPO signal)."""
    groups = list(groups)
    if not groups:
        return None
    equal = sum(1 for g in groups if g.get("group/scores_equal") == 1.0)
    return equal / len(groups)


def step_timings(run: RunRecords) -> list[dict[str, float]]:
    """Per trainer step: rollouts, OPD (judge + teacher), training and weight sync, in seconds.

    Rollouts and OPD are sums over the groups sampled by the policy version that step trained
    from (the step minus its lag, rounded): each group's mean rollout time and mean OPD time per
    rollout, times the rollouts in it. They overlap on the machine (a rollout's OPD runs while the
    others generate), so `opd_share` is OPD's share of the serial sum, an upper bound on the wall
    time it adds; `tail_after_rollouts_s` is the wall time a group waited after its last rollout
    ended (verifier + OPD of that rollout)."""
    by_version: dict[int, list[dict[str, Any]]] = {}
    for group in run.env_groups:
        if POLICY_VERSION_KEY in group:
            by_version.setdefault(int(group[POLICY_VERSION_KEY]), []).append(group)
    rows = []
    for index, step in enumerate(run.trainer_steps):
        lag = step.get("policy/lag_mean")
        version = index - round(lag) if lag is not None else None
        groups = by_version.get(version, []) if version is not None else []
        size = run.generations_per_step / max(1, len(groups)) if groups else 0.0
        rollouts = sum(g.get("group/rollout_mean_s", 0.0) * size for g in groups)
        opd = sum(g.get("group/opd_duration_mean_s", 0.0) * size for g in groups)
        train = float(step.get("step_time_s", 0.0))
        sync = float(step.get("time/checkpoint_and_sync_s", 0.0))
        total = rollouts + opd + train + sync
        rows.append(
            {
                "step": index + 1,
                "rollouts_s": rollouts,
                "opd_s": opd,
                "train_s": train,
                "sync_s": sync,
                "tail_after_rollouts_s": statistics.fmean(
                    g.get("group/tail_after_rollouts_s", 0.0) for g in groups
                )
                if groups
                else 0.0,
                "opd_share": opd / total if total else 0.0,
            }
        )
    return rows


def per_step_records(run: RunRecords) -> list[dict[str, Any]]:
    """The JSON's per-step rows: the kept trainer metrics, the hint rate and equal-score share of
    the groups of the version it trained from, and the stage timings."""
    timings = step_timings(run)
    by_version: dict[int, list[dict[str, Any]]] = {}
    for group in run.env_groups:
        if POLICY_VERSION_KEY in group:
            by_version.setdefault(int(group[POLICY_VERSION_KEY]), []).append(group)
    rows = []
    for index, step in enumerate(run.trainer_steps):
        lag = step.get("policy/lag_mean")
        groups = by_version.get(index - round(lag), []) if lag is not None else []
        hint_rates = [g["opd/hint_rate"] for g in groups if "opd/hint_rate" in g]
        rows.append(
            {
                **_kept(step),
                "hint_rate": statistics.fmean(hint_rates) if hint_rates else None,
                "equal_score_share": equal_score_share(groups),
                "timings": timings[index],
            }
        )
    return rows


def mean_band(curves: Sequence[Sequence[tuple[int, float]]]) -> list[tuple[int, float, float, float]]:
    """(x, mean, min, max) over seeds at every x that some seed evaluated, within the range every
    seed covers. Runs of this bench share one grid; runs of the earlier bench (its serve worker
    evaluated whichever policy was newest) can differ, and a seed not evaluated at x counts with its
    value interpolated linearly between its own evaluations before and after x."""
    if not curves or not all(curves):
        return []
    first, last = max(curve[0][0] for curve in curves), min(curve[-1][0] for curve in curves)
    grid = sorted({x for curve in curves for x, _ in curve if first <= x <= last})
    out = []
    for x in grid:
        values = [float(np.interp(x, *zip(*curve, strict=True))) for curve in curves]
        out.append((x, statistics.fmean(values), min(values), max(values)))
    return out


def generations_to_reach(band: Sequence[tuple[int, float, float, float]], target: float) -> int | None:
    """The first x of the band at which the mean reaches `target`; None when it never does."""
    for x, mean, _, _ in band:
        if mean >= target:
            return x
    return None


def headline(bands: dict[str, list[tuple[int, float, float, float]]]) -> dict[str, Any]:
    """The last line's object; `hybrid_generations_over_grpo` last: null when the hybrid never
    reached GRPO-only's final success, and when GRPO-only did not improve on its start (then there
    is nothing to reach: the start policy already has it)."""

    def final(arm: str) -> float | None:
        return bands[arm][-1][1] if bands.get(arm) else None

    opd = bands.get("opd") or []
    opd_gain = opd[-1][1] - opd[0][1] if len(opd) >= 2 else None
    ratio = None
    grpo, hybrid = bands.get("grpo") or [], bands.get("hybrid") or []
    if grpo and hybrid and grpo[-1][0] > 0 and grpo[-1][1] > grpo[0][1]:
        reached = generations_to_reach(hybrid, grpo[-1][1])
        ratio = reached / grpo[-1][0] if reached is not None else None
    return {
        "opd_only_gain": opd_gain,
        "grpo_only_final": final("grpo"),
        "hybrid_final": final("hybrid"),
        "hybrid_generations_over_grpo": ratio,
    }


def probe_summary(runs: Sequence[RunRecords]) -> dict[str, Any]:
    """Per arm: the teacher gap on the first groups (probe.py) at the start and the end,
    mean over seeds, and in how many seeds it fell; only arms whose probes measured something."""
    out: dict[str, Any] = {}
    for arm in ARMS:
        probes = [r.probe for r in runs if r.arm == arm and r.probe.get("teacher_gap_all_end") is not None]
        if not probes:
            continue
        starts = [p["teacher_gap_all_start"] for p in probes]
        ends = [p["teacher_gap_all_end"] for p in probes]
        out[f"{arm}_teacher_gap_start"] = statistics.fmean(starts)
        out[f"{arm}_teacher_gap_end"] = statistics.fmean(ends)
        out[f"{arm}_teacher_gap_fell"] = (
            f"{sum(e < s for s, e in zip(starts, ends, strict=True))}/{len(probes)}"
        )
    return out


CONVENTION_KINDS = ("module", "name")


def convention_followed(evaluation: dict[str, Any], kind: str) -> tuple[int, int] | None:
    """(attempts that followed the `kind` convention, attempts) of one evaluation, or None when the
    evaluation recorded no choices (environments/tasks/convention_choice.py)."""
    row = (evaluation.get("conventions") or {}).get(kind)
    return (int(row["followed"]), int(row["attempts"])) if row else None


def convention_summary(runs: Sequence[RunRecords]) -> dict[str, Any]:
    """Per arm and convention kind: the share of held-out attempts that followed the convention the
    hints reveal, at the start and after the last step (mean over seeds), and its gain; only arms
    whose evaluations recorded choices."""
    out: dict[str, Any] = {}
    for arm in ARMS:
        for kind in CONVENTION_KINDS:
            pairs = [
                (convention_followed(r.evals[0], kind), convention_followed(r.evals[-1], kind))
                for r in runs
                if r.arm == arm and r.evals
            ]
            pairs = [(a, b) for a, b in pairs if a and b]
            if not pairs:
                continue
            start = statistics.fmean(a[0] / a[1] for a, _ in pairs)
            end = statistics.fmean(b[0] / b[1] for _, b in pairs)
            out[f"{arm}_{kind}_convention_start"] = start
            out[f"{arm}_{kind}_convention_end"] = end
            out[f"{arm}_{kind}_convention_gain"] = end - start
    return out


def _followed_cell(run: RunRecords, kind: str) -> str:
    """`start>end` followed counts of one run's first and last evaluation, `-` when not recorded."""
    if not run.evals:
        return "-"
    start, end = convention_followed(run.evals[0], kind), convention_followed(run.evals[-1], kind)
    return f"{start[0]}>{end[0]}/{end[1]}" if start and end else "-"


def summary_table(runs: Sequence[RunRecords]) -> str:
    """One line per run: start and end held-out success, which held-out attempts followed the module
    and the name convention (`start>end/attempts`), steps, equal-score share, hint rate, lag, and
    the mean stage timings with OPD's share."""
    header = (
        f"{'arm':<7}{'seed':>5}{'start':>7}{'end':>7}{'module':>9}{'name':>9}{'steps':>6}{'equal':>7}"
        f"{'hints':>7}{'lag':>6}"
        f"{'roll_s':>8}{'opd_s':>7}{'train_s':>8}{'sync_s':>7}{'opd%':>6}"
    )
    lines = [header, "-" * len(header)]
    for run in runs:
        curve = eval_curve(run)
        rows = per_step_records(run)
        timings = [r["timings"] for r in rows]

        def mean(values: list[float | None]) -> float:
            kept = [v for v in values if v is not None]
            return statistics.fmean(kept) if kept else float("nan")

        lines.append(
            f"{run.arm:<7}{run.seed:>5}{curve[0][1] if curve else float('nan'):>7.2f}"
            f"{curve[-1][1] if curve else float('nan'):>7.2f}"
            f"{_followed_cell(run, 'module'):>9}{_followed_cell(run, 'name'):>9}{len(run.trainer_steps):>6}"
            f"{mean([equal_score_share(run.env_groups)]):>7.2f}{mean([r['hint_rate'] for r in rows]):>7.2f}"
            f"{mean([r.get('policy/lag_mean') for r in rows]):>6.2f}"
            f"{mean([t['rollouts_s'] for t in timings]):>8.1f}{mean([t['opd_s'] for t in timings]):>7.1f}"
            f"{mean([t['train_s'] for t in timings]):>8.2f}{mean([t['sync_s'] for t in timings]):>7.2f}"
            f"{100 * mean([t['opd_share'] for t in timings]):>6.1f}"
        )
    return "\n".join(lines)
