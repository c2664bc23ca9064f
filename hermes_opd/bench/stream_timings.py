"""The statistics both proxy benches report for a set of streamed requests (pure logic): p50/p95 of
the wall time and of the time to the first streamed text, the request count, the mean completion
tokens, and the ratios of one such summary to another's (hermes_opd/bench/proxy_bench.py,
hermes_opd/bench/sampled_logprobs_cost.py)."""

from __future__ import annotations

import statistics
from typing import Any

from environments.proxy.latency import percentile


def timing_stats(times: list[float], tokens: list[int], firsts: list[float]) -> dict[str, Any]:
    """p50/p95 of `times` (wall seconds) and `firsts` (seconds to the first text), one per request."""
    return {
        "p50_s": percentile(times, 0.5),
        "p95_s": percentile(times, 0.95),
        "requests": len(times),
        "completion_tokens_mean": statistics.fmean(tokens),
        "ttft_p50_s": percentile(firsts, 0.5),
        "ttft_p95_s": percentile(firsts, 0.95),
    }


def timing_ratios(summary: dict[str, Any], base: dict[str, Any]) -> dict[str, float]:
    """Each of `summary`'s times over the same statistic of `base`."""
    ratios: dict[str, float] = {}
    for key in ("p50", "p95"):
        ratios[f"{key}_ratio"] = summary[f"{key}_s"] / base[f"{key}_s"]
        ratios[f"ttft_{key}_ratio"] = summary[f"ttft_{key}_s"] / base[f"ttft_{key}_s"]
    return ratios
