"""The proxy's metrics snapshot (the JSON of its `/metrics.json`: counts, sessions, tokens held,
policy model and version, the latency summary, the sample feed's stats) as Prometheus text
exposition, through `prometheus_client`: a custom collector over the snapshot, rendered once per
scrape. No state of its own; the proxy's counters stay where they are counted.

- every entry of `counts`: a counter `hermes_opd_proxy_<name>_total` (e.g. `..._requests_total`);
- `sessions`, `tokens_held`, `policy_version`: gauges `hermes_opd_proxy_<name>`; the policy model:
  the info metric `hermes_opd_proxy_policy_info{model="..."}`;
- `latency`: summaries `hermes_opd_proxy_<own|upstream|first_text>_seconds` with quantiles 0.5 and
  0.95 and `_count` (the requests in the window; no `_sum`, the window keeps none);
- `feed`: counters `hermes_opd_proxy_feed_<name>_total`, gauges for what goes up and down
  (`pending`, `groups_waiting`, `disk_full`), and `hermes_opd_proxy_feed_turns_total{status=...}`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Mapping
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily, Metric
from prometheus_client.registry import Collector

PREFIX = "hermes_opd_proxy"
CONTENT_TYPE = CONTENT_TYPE_LATEST
"""The `Content-Type` of the rendered text (Prometheus text format 0.0.4)."""

GAUGES = ("sessions", "tokens_held", "policy_version")
FEED_GAUGES = frozenset({"pending", "groups_waiting", "disk_full"})
LATENCIES = {
    "own": "the proxy's own time per request (handler wall time minus the time waiting on vLLM)",
    "upstream": "time per request spent waiting on the policy server's stream",
    "first_text": "time until the first answer text of a request was ready",
}
QUANTILES = {"p50": "0.5", "p95": "0.95"}


def metric_name(*parts: str) -> str:
    """`hermes_opd_proxy_<parts>`, with anything but [a-zA-Z0-9_] replaced by `_`."""
    return "_".join([PREFIX, *(re.sub(r"[^a-zA-Z0-9_]", "_", p) for p in parts)])


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, int | float) and math.isfinite(value):
        return float(value)
    return None


class ProxySnapshotCollector(Collector):
    """Yields the metric families of one snapshot (see the module docstring)."""

    def __init__(self, snapshot: Mapping[str, Any]) -> None:
        self.snapshot = snapshot

    def collect(self) -> Iterator[Metric]:
        snap = self.snapshot
        for name, value in sorted((snap.get("counts") or {}).items()):
            if (number := _number(value)) is not None:
                yield CounterMetricFamily(metric_name(name), f"proxy events: {name}", value=number)
        for name in GAUGES:
            if (number := _number(snap.get(name))) is not None:
                yield GaugeMetricFamily(metric_name(name), f"proxy {name.replace('_', ' ')}", value=number)
        if snap.get("policy_model"):
            yield InfoMetricFamily(
                metric_name("policy"),
                "the policy model the proxy serves now",
                value={"model": str(snap["policy_model"])},
            )
        yield from _latency_summaries(snap.get("latency") or {})
        yield from _feed_families(snap.get("feed") or {})


def _latency_summaries(latency: Mapping[str, Any]) -> Iterator[Metric]:
    count = _number(latency.get("requests"))
    for key, doc in LATENCIES.items():
        name = metric_name(f"{key}_seconds")
        family = Metric(name, f"{doc}, over the last requests", "summary")
        for suffix, quantile in QUANTILES.items():
            value = _number(latency.get(f"{key}_ms_{suffix}"))
            if value is not None:
                family.add_sample(name, {"quantile": quantile}, value / 1e3)
        if not family.samples:
            continue
        if count is not None:
            family.add_sample(f"{name}_count", {}, count)
        yield family


def _feed_families(feed: Mapping[str, Any]) -> Iterator[Metric]:
    for name, value in sorted(feed.items()):
        if isinstance(value, Mapping):
            family = CounterMetricFamily(
                metric_name("feed", "turns"), "turns the sample feed finished, by status", labels=["status"]
            )
            for status, count in sorted(value.items()):
                if (number := _number(count)) is not None:
                    family.add_metric([str(status)], number)
            yield family
            continue
        if (number := _number(value)) is None:
            continue
        if name in FEED_GAUGES:
            yield GaugeMetricFamily(
                metric_name("feed", name), f"sample feed: {name.replace('_', ' ')}", value=number
            )
        else:
            yield CounterMetricFamily(
                metric_name("feed", name), f"sample feed: {name.replace('_', ' ')}", value=number
            )


def render_proxy_metrics(snapshot: Mapping[str, Any]) -> str:
    """The Prometheus text exposition of one proxy metrics snapshot (serve with `CONTENT_TYPE`)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ProxySnapshotCollector(snapshot))
    return generate_latest(registry).decode("utf-8")
