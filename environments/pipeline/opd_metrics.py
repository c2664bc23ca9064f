"""Per-group OPD metrics (pure): rates, the A_t distribution and latencies; `prm/...` metrics of
the process reward when it is on."""

from __future__ import annotations

import statistics
from collections import Counter
from typing import Any

from environments.pipeline.opd_pipeline import TURN_STATUSES, SequenceDistill
from hermes_opd.contract.process_reward import PRM_STATUSES


def _quantile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


def group_metrics(sequences: list[SequenceDistill]) -> dict[str, Any]:
    """Flat `opd/...` metrics for one group."""
    statuses: Counter[str] = Counter()
    judged = accepted = 0
    agreements: list[float] = []
    judge_latency: list[float] = []
    teacher_latency: list[float] = []
    advantages: list[float] = []
    scored = generated = in_topk = 0
    for seq in sequences:
        scored += seq.scored_positions
        generated += seq.generated_positions
        in_topk += seq.student_in_topk
        advantages.extend(seq.advantages)
        for turn in seq.turns:
            statuses[turn.status] += 1
            if turn.votes is not None:
                judged += 1
                accepted += int(bool(turn.votes.get("accepted")))
                if turn.votes.get("agreement") is not None:
                    agreements.append(float(turn.votes["agreement"]))
            if turn.judge_latency_s is not None:
                judge_latency.append(turn.judge_latency_s)
            if turn.teacher_latency_s is not None:
                teacher_latency.append(turn.teacher_latency_s)
    turns = sum(statuses.values())
    abs_adv = [abs(a) for a in advantages]
    metrics: dict[str, Any] = {
        "opd/turns": turns,
        **{f"opd/turns_{status}": statuses.get(status, 0) for status in TURN_STATUSES},
        "opd/hint_rate": accepted / judged if judged else 0.0,
        "opd/vote_agreement": statistics.fmean(agreements) if agreements else 0.0,
        "opd/scored_token_fraction": scored / generated if generated else 0.0,
        "opd/scored_tokens": scored,
        "opd/student_in_topk_rate": in_topk / scored if scored else 0.0,
        "opd/prefix_mismatches": 0,  # teacher context is spliced from the student's exact ids
        "opd/adv_mean": statistics.fmean(advantages) if advantages else 0.0,
        "opd/adv_frac_positive": sum(a > 0 for a in advantages) / len(advantages) if advantages else 0.0,
        "opd/adv_abs_p50": _quantile(abs_adv, 0.5),
        "opd/adv_abs_p90": _quantile(abs_adv, 0.9),
        "opd/adv_abs_p99": _quantile(abs_adv, 0.99),
        "opd/judge_latency_mean_s": statistics.fmean(judge_latency) if judge_latency else 0.0,
        "opd/judge_latency_p95_s": _quantile(judge_latency, 0.95),
        "opd/teacher_latency_mean_s": statistics.fmean(teacher_latency) if teacher_latency else 0.0,
        "opd/teacher_latency_p95_s": _quantile(teacher_latency, 0.95),
    }
    looked_up = [v for seq in sequences for row in seq.student_topk_teacher.values() for v in row]
    if looked_up:  # the env recorded the student's top-K (env.student_topk_k) and the teacher scored it
        metrics["opd/student_topk_ids_scored"] = len(looked_up)
        metrics["opd/student_topk_teacher_unknown_frac"] = sum(v is None for v in looked_up) / len(looked_up)
    metrics.update(process_reward_metrics(sequences))
    return metrics


def process_reward_metrics(sequences: list[SequenceDistill]) -> dict[str, Any]:
    """Flat `prm/...` metrics for one group: turns per status, the scores of the scored turns, the
    effective turns, ties and the judge's latency; {} when no sequence carries a process reward."""
    turns = [t for seq in sequences if seq.prm is not None for t in seq.prm["turns"]]
    if not turns and all(seq.prm is None for seq in sequences):
        return {}
    statuses = Counter(t["status"] for t in turns)
    scored = [t for t in turns if t["status"] == "scored"]
    scores = [t["score"] for t in scored]
    latency = [t["votes"]["latency_s"] for t in scored if "latency_s" in t["votes"]]
    return {
        "prm/turns": len(turns),
        **{f"prm/turns_{status}": statuses.get(status, 0) for status in PRM_STATUSES},
        "prm/score_mean": statistics.fmean(scores) if scores else 0.0,
        **{
            f"prm/scored_{name}_frac": sum(s == v for s in scores) / len(scores) if scores else 0.0
            for name, v in (("positive", 1), ("negative", -1), ("zero", 0))
        },
        "prm/effective_turns": sum(1 for t in turns if t["effective"]),
        "prm/tie_frac": sum(1 for t in scored if t["votes"].get("tie")) / len(scored) if scored else 0.0,
        "prm/judge_latency_mean_s": statistics.fmean(latency) if latency else 0.0,
        "prm/judge_latency_p95_s": _quantile(latency, 0.95),
    }
