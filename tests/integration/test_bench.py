"""`hermes-opd bench ...` in --quick mode: JSON shape (headline ratio last, positive finite numbers),
the reference schedule really sequential, the fake teacher in vLLM's exact format, and the fast
prompt-logprobs parser equal to the one it replaced (results and errors).
The tests of its parts that need no server: tests/unit/test_bench.py."""

from __future__ import annotations

import pytest

from tests.support.bench import assert_shape, run_bench

# -- pure helpers ----------------------------------------------------------------------------------


# -- the fake remote teacher speaks vLLM's exact format -------------------------------------------


# -- the fast parser replaced the plain one without changing a result or an error --------------------


# -- the benchmarks, --quick -------------------------------------------------------------------------


# -- against the real dev vLLM server ----------------------------------------------------------------
@pytest.mark.integration
def test_pipeline_bench_quick_real(capsys, dev_server):
    argv = [
        "pipeline",
        "--quick",
        "--backend",
        "real",
        "--policy-url",
        dev_server.base_url,
        "--model",
        dev_server.model_name,
        "--tokenizer",
        str(dev_server.model_dir),
    ]
    result = run_bench(capsys, argv)
    assert_shape(result, "real_reference_over_ours_opd")
    real = result["real"]
    assert real["judge_max_in_flight_reference"] == result["config"]["judge_m"]
    assert real["scored_turns_reference"] == real["scored_turns_ours"] > 0
    assert real["teacher_parallelism"] > 0


@pytest.mark.integration
def test_teacher_bench_quick(capsys, dev_server):
    argv = [
        "teacher",
        "--quick",
        "--policy-url",
        dev_server.base_url,
        "--model",
        dev_server.model_name,
        "--tokenizer",
        str(dev_server.model_dir),
    ]
    result = run_bench(capsys, argv)
    assert_shape(result, "parse_speedup_turn")
    assert result["all_identical"] is True
    assert all(cell["bytes"] > 0 and cell["server_s"] > 0 for cell in result["cells"].values())


@pytest.mark.integration
def test_payload_bench_quick_collects_real_groups(capsys, dev_server):
    argv = [
        "payload",
        "--quick",
        "--policy-url",
        dev_server.base_url,
        "--model",
        dev_server.model_name,
        "--tokenizer",
        str(dev_server.model_dir),
    ]
    result = run_bench(capsys, argv)
    assert_shape(result, "raw_dense_over_ours")
    assert result["groups"] == 1 and result["sequences"] == 2
    assert result["float_format"]["excess_digit_values"] == 0


@pytest.mark.integration
def test_teacher_scaling_bench_quick(capsys, dev_server):
    argv = [
        "teacher-scaling",
        "--quick",
        "--policy-url",
        dev_server.base_url,
        "--model",
        dev_server.model_name,
        "--tokenizer",
        str(dev_server.model_dir),
    ]
    result = run_bench(capsys, argv)
    assert_shape(result, "completions_over_best")
    assert "best_over_prefill" in result and result["best_over_prefill"] > 0
    assert result["all_paths_agree"] is True and result["generate_available"] is True
    assert result["paths"] == ["completions", "generate", "transformers"]
    for cell in result["cells"].values():
        assert cell["prefill_s"] > 0
        assert cell["transformers"]["bytes_over_turn_rows"] == pytest.approx(1.0, abs=0.02)
        assert cell["generate"]["bytes"] < cell["completions"]["bytes"]  # no decoded strings
        assert cell["completions"]["max_abs_diff_vs_completions"] == 0.0
        assert cell["transformers"]["max_abs_diff_vs_completions"] <= 1e-4


@pytest.mark.integration
def test_proxy_bench_quick(capsys, dev_server):
    argv = [
        "proxy",
        "--quick",
        "--sessions",
        "1,4",
        "--policy-url",
        dev_server.base_url,
        "--model",
        dev_server.model_name,
        "--tokenizer",
        str(dev_server.model_dir),
    ]
    result = run_bench(capsys, argv)
    assert_shape(result, "worst_overhead_ratio")
    worst = 0.0
    ttft = []
    for wire in ("chat", "responses", "messages"):
        for sessions, requests in (("sessions_1", 2), ("sessions_4", 8)):
            cell = result[wire][sessions]
            assert [cell[p]["requests"] for p in ("direct", "serve", "record", "train")] == [requests] * 4
            firsts = [cell[p]["first_turn"] for p in ("direct", "serve", "record", "train")]
            assert [f["requests"] for f in firsts] == [requests // 2] * 4  # 2 turns a session
            for mode in ("serve", "record", "train"):
                assert cell[mode]["completion_tokens_mean"] > 0, (wire, mode)
                if wire != "messages":  # the same seeds give the same first continuations on every path
                    assert (
                        cell[mode]["first_turn"]["completion_tokens_mean"]
                        == cell["direct"]["first_turn"]["completion_tokens_mean"]
                    )
            # the headlines: the sessions' first requests, the only ones the same on every path
            first = [cell[m]["first_turn"] for m in ("serve", "record")]
            worst = max(worst, *(f[f"{q}_ratio"] for f in first for q in ("p50", "p95")))
            ttft += [f[f"ttft_{q}_ratio"] for f in first for q in ("p50", "p95")]
            assert cell["serve"]["p50_ratio"] == pytest.approx(
                cell["serve"]["p50_s"] / cell["direct"]["p50_s"], rel=1e-3
            )
    assert result["worst_overhead_ratio"] == worst  # train's teacher placement is not in the headline
    assert result["worst_ttft_ratio"] == max(ttft) > 0  # every request streamed, direct and proxied
    for mode in ("serve", "record", "train"):  # the proxy's own time, from its /metrics
        own = result[f"{mode}_own_time"]
        assert own["requests"] == 33, mode  # 2 requests at 1 session, 8 at 4, 1 warm-up, on each of 3 wires
        assert 0 < own["own_ms_p50"] < own["upstream_ms_p50"], (mode, own)
    for sessions, requests in (("sessions_1", 1), ("sessions_4", 4)):  # vLLM's price for the logprobs
        cost = result["vllm_sampled_logprobs"][sessions]
        assert [cost[v]["requests"] for v in ("without", "with")] == [requests] * 2
        # the proxy's own request for the first turns: the same seeds sample the same tokens
        expected = result["chat"][sessions]["direct"]["first_turn"]["completion_tokens_mean"]
        assert cost["with"]["completion_tokens_mean"] == cost["without"]["completion_tokens_mean"] == expected
        assert cost["p50_ratio"] == pytest.approx(cost["with"]["p50_s"] / cost["without"]["p50_s"], rel=1e-3)
    for mode in ("record", "train"):  # each session's first turn got its next state
        assert result[f"{mode}_feed_at_end"]["submitted"] == 15, mode
        assert result[f"{mode}_feed_at_end"]["pending"] == 0, mode
