"""The proxy's metrics snapshot as Prometheus text (hermes_opd/runtime/prometheus.py), read back
with prometheus_client's own parser."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from hermes_opd.runtime.prometheus import CONTENT_TYPE, render_proxy_metrics

SNAPSHOT = {
    "counts": {"requests": 12, "turns_finished": 7, "forks_tool": 1, "unauthorized": 2},
    "sessions": 3,
    "tokens_held": 4096,
    "policy_model": "live-step4",
    "policy_version": 4,
    "latency": {
        "requests": 12,
        "own_ms_p50": 1.5,
        "own_ms_p95": 4.0,
        "upstream_ms_p50": 120.0,
        "upstream_ms_p95": 300.0,
        "first_text_ms_p50": 80.0,
        "first_text_ms_p95": 200.0,
    },
    "feed": {
        "submitted": 7,
        "scored_turns": 5,
        "groups_written": 1,
        "statuses": {"ok": 5, "failed": 2},
        "disk_full": False,
        "groups_waiting": 0,
        "pending": 2,
    },
}


def _families() -> dict[str, object]:
    return {f.name: f for f in text_string_to_metric_families(render_proxy_metrics(SNAPSHOT))}


def _samples(family) -> dict[tuple, float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value for s in family.samples}


def test_counts_are_counters_with_total():
    families = _families()
    requests = families["hermes_opd_proxy_requests"]
    assert requests.type == "counter"
    assert _samples(requests)[("hermes_opd_proxy_requests_total", ())] == 12
    assert families["hermes_opd_proxy_turns_finished"].samples[0].value == 7
    text = render_proxy_metrics(SNAPSHOT)
    assert "hermes_opd_proxy_requests_total 12.0" in text
    assert "text/plain" in CONTENT_TYPE


def test_gauges_info_and_latency_summaries():
    families = _families()
    for name, value in (("sessions", 3), ("tokens_held", 4096), ("policy_version", 4)):
        family = families[f"hermes_opd_proxy_{name}"]
        assert family.type == "gauge" and family.samples[0].value == value
    info = families["hermes_opd_proxy_policy_info"]  # an info metric is a gauge of 1 in the text format
    assert info.samples[0].labels == {"model": "live-step4"} and info.samples[0].value == 1
    own = families["hermes_opd_proxy_own_seconds"]
    assert own.type == "summary"
    assert _samples(own) == {
        ("hermes_opd_proxy_own_seconds", (("quantile", "0.5"),)): 0.0015,
        ("hermes_opd_proxy_own_seconds", (("quantile", "0.95"),)): 0.004,
        ("hermes_opd_proxy_own_seconds_count", ()): 12,
    }
    assert families["hermes_opd_proxy_upstream_seconds"].samples[1].value == 0.3


def test_feed_counters_gauges_and_statuses():
    families = _families()
    assert families["hermes_opd_proxy_feed_submitted"].type == "counter"
    assert (
        families["hermes_opd_proxy_feed_submitted"].samples[0].name == "hermes_opd_proxy_feed_submitted_total"
    )
    assert families["hermes_opd_proxy_feed_pending"].type == "gauge"
    assert families["hermes_opd_proxy_feed_disk_full"].samples[0].value == 0
    statuses = _samples(families["hermes_opd_proxy_feed_turns"])
    assert statuses == {
        ("hermes_opd_proxy_feed_turns_total", (("status", "failed"),)): 2,
        ("hermes_opd_proxy_feed_turns_total", (("status", "ok"),)): 5,
    }


def test_a_proxy_without_a_feed_or_requests_still_renders():
    text = render_proxy_metrics(
        {"counts": {}, "sessions": 0, "policy_model": "m", "policy_version": 0, "latency": {"requests": 0}}
    )
    names = {f.name for f in text_string_to_metric_families(text)}
    assert names == {
        "hermes_opd_proxy_sessions",
        "hermes_opd_proxy_policy_version",
        "hermes_opd_proxy_policy_info",
    }
