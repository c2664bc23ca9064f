"""environments/proxy/latency.py: the proxy's own time per request, apart from vLLM's."""

from __future__ import annotations

from environments.proxy.latency import LatencyWindow, percentile


def test_percentile_is_nearest_rank_and_zero_for_none():
    assert percentile([], 0.5) == 0.0
    assert percentile([3.0, 1.0, 2.0], 0.5) == 2.0
    assert percentile([float(i) for i in range(1, 21)], 0.95) == 19.0  # rank round(0.95 * 19) = 18


def test_own_time_is_the_handler_minus_the_upstream_call_over_the_last_requests():
    window = LatencyWindow(size=3)
    window.add(0.100, 0.090)  # pushed out by the three below
    for handler_s, upstream_s in ((0.050, 0.049), (0.042, 0.040), (0.033, 0.030)):
        window.add(handler_s, upstream_s)
    assert window.summary() == {
        "requests": 3,
        "own_ms_p50": 2.0,
        "own_ms_p95": 3.0,
        "own_ms_max": 3.0,
        "upstream_ms_p50": 40.0,
        "upstream_ms_p95": 49.0,
        "first_text_ms_p50": 0.0,
        "first_text_ms_p95": 0.0,
    }


def test_time_to_first_text_counts_only_the_answers_that_had_text():
    window = LatencyWindow()
    window.add(0.050, 0.045, 0.012)
    window.add(0.060, 0.055, None)  # an answer that was only a tool call: no text streamed
    window.add(0.070, 0.065, 0.020)
    assert (window.summary()["first_text_ms_p50"], window.summary()["first_text_ms_p95"]) == (12.0, 20.0)


def test_a_request_that_never_reached_vllm_counts_its_whole_time_and_never_below_zero():
    window = LatencyWindow()
    window.add(0.004, 0.0)
    window.add(0.010, 0.0105)  # clock jitter: upstream measured inside the handler, a hair longer
    assert window.summary()["own_ms_p95"] == 4.0
    assert window.summary()["own_ms_p50"] == 0.0
