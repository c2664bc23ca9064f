"""`hermes-opd bench ...` in --quick mode without the dev vLLM: JSON shape (headline ratio last, positive finite
numbers), the fake teacher in vLLM's exact format, and the fast prompt-logprobs parser equal to the one it
replaced (results and errors). The benches against the dev vLLM are in tests/integration/test_bench.py."""

from __future__ import annotations

import json
import math
import os
import random
import shutil

import pytest

from hermes_opd.bench import cli
from hermes_opd.bench.common import median_result, with_headline
from hermes_opd.devkit.fake_endpoints import FakeEndpoints, FakeSettings, TeacherBodyBuilder
from hermes_opd.vllm_api.client import VLLMCompletionsClient
from hermes_opd.vllm_api.errors import UnexpectedResponseError
from scoring.request_paths import completions_prompt_topk
from scoring.response_parsing import parse_prompt_topk, parse_prompt_topk_json
from tests.support.bench import assert_shape, run_bench


def test_with_headline_moves_the_ratio_last_and_median_keeps_it_there():
    result = with_headline({"ratio": 1.0, "a": 1, "nested": {"x": 2.0}}, "ratio", 3.0)
    assert list(result) == ["a", "nested", "ratio"]
    runs = [
        with_headline({"a": a, "name": "n", "nested": {"x": x}}, "ratio", r)
        for a, x, r in [(1, 5.0, 2.0), (3, 1.0, 9.0), (2, 3.0, 4.0)]
    ]
    med = median_result(runs)
    assert med == {"a": 2, "name": "n", "nested": {"x": 3.0}, "ratio": 4.0}
    assert list(med)[-1] == "ratio"


def test_cli_repeat_reports_medians_with_the_headline_last(capsys, monkeypatch):
    values = iter([1.0, 5.0, 3.0])
    monkeypatch.setattr(cli, "run_once", lambda args: {"bench": "x", "t": 1.0, "ratio": next(values)})
    result = run_bench(capsys, ["loss", "--repeat", "3"])
    assert result["ratio"] == 3.0 and list(result)[-1] == "ratio"
    assert result["repeat"] == {"runs": 3, "statistic": "median"}


@pytest.mark.parametrize("k", [1, 5, 50])
def test_fake_teacher_body_is_vllm_prompt_logprobs(k):
    builder = TeacherBodyBuilder(FakeSettings(vocab_size=512))
    rng = random.Random(k)
    ids = [rng.randrange(512) for _ in range(200)]
    body = json.loads(builder.body(ids, k, "m"))
    entries = body["choices"][0]["prompt_logprobs"]
    assert len(entries) == len(ids) and entries[0] is None
    for pos, entry in enumerate(entries[1:], start=1):
        keys = list(entry)
        assert keys[0] == str(ids[pos])  # the actual token comes first
        ranks = [v["rank"] for v in entry.values()]
        inside = entry[str(ids[pos])]["rank"] <= k
        assert len(entry) == (k if inside else k + 1)
        assert sorted(ranks[1:]) == ranks[1:] and set(range(1, k + 1)) <= set(ranks)
        assert all(set(v) == {"logprob", "rank", "decoded_token"} for v in entry.values())
    parsed = parse_prompt_topk(body, ids, k)
    for pos in range(1, len(ids)):
        mass = sum(math.exp(x) for x in parsed.logprobs[pos])
        assert mass <= 1.0 + 1e-6 and ids[pos] in parsed.token_ids[pos]


def _random_entry(rng: random.Random, actual: int) -> dict:
    n = rng.randrange(1, 8)
    toks = rng.sample(range(20), n)
    if rng.random() < 0.8 and actual not in toks:
        toks[0] = actual
    ranks = rng.sample(range(1, 12), n)
    if rng.random() < 0.5:
        ranks = sorted(ranks)
    if rng.random() < 0.3:  # vLLM's order: the actual token first, ranked last
        ranks = [max(ranks) + 3, *sorted(ranks)[: n - 1]]
    entry = {}
    for tok, rank in zip(toks, ranks, strict=True):
        lp = -rng.random() * 5 if rng.random() > 0.02 else rng.choice([0.5, float("nan")])
        entry[str(tok)] = {"logprob": lp, "rank": rank if rng.random() > 0.05 else None, "decoded_token": "x"}
    if rng.random() < 0.02:
        entry = {"x": 1}
    return entry


def _outcome(fn):
    try:
        result = fn()
    except UnexpectedResponseError as exc:
        return ("error", str(exc))
    return ("ok", result.token_ids, result.logprobs)


def test_fast_parser_matches_the_plain_parser_on_random_bodies():
    rng = random.Random(0)
    for _ in range(2000):
        n = rng.randrange(1, 6)
        ids = [rng.randrange(20) for _ in range(n)]
        entries = [None] + [_random_entry(rng, a) for a in ids[1:]]
        if rng.random() < 0.03:
            entries[rng.randrange(n)] = None
        body = {"choices": [{"prompt_logprobs": entries}]}
        k = rng.randrange(1, 6)
        plain = _outcome(lambda body=body, ids=ids, k=k: parse_prompt_topk(body, ids, k))
        fast = _outcome(
            lambda body=body, ids=ids, k=k: parse_prompt_topk_json(json.dumps(body).encode(), ids, k)
        )
        assert plain == fast, (body, ids, k)
        from_pos = rng.randrange(0, n + 2)
        skipped = _outcome(
            lambda body=body, ids=ids, k=k, f=from_pos: parse_prompt_topk_json(
                json.dumps(body), ids, k, from_pos=f
            )
        )
        assert skipped == _outcome(
            lambda body=body, ids=ids, k=k, f=from_pos: parse_prompt_topk(body, ids, k, from_pos=f)
        )
        if plain[0] == "ok":  # skipping rows never changes the rows that are kept
            assert skipped[0] == "ok"
            assert (
                skipped[1][from_pos:] == plain[1][from_pos:] and skipped[2][from_pos:] == plain[2][from_pos:]
            )
            assert all(row == [] for row in skipped[1][:from_pos])


async def test_client_prompt_topk_from_pos_against_the_fake_teacher():
    with FakeEndpoints(FakeSettings(teacher_latency_s=0.0, judge_latency_s=0.0)) as fake:
        client = VLLMCompletionsClient(fake.base_url, "fake")
        ids = [random.Random(1).randrange(4096) for _ in range(300)]
        full = (await completions_prompt_topk(client, ids, 20)).topk
        turn = (await completions_prompt_topk(client, ids, 20, from_pos=250)).topk
        await client.close()
    assert turn.token_ids[250:] == full.token_ids[250:] and turn.logprobs[250:] == full.logprobs[250:]
    assert turn.token_ids[:250] == [[]] * 250 and len(full.token_ids[1]) in (20, 21)


def test_pipeline_bench_quick_remote(capsys, dev_model_dir):
    result = run_bench(
        capsys, ["pipeline", "--quick", "--backend", "remote", "--tokenizer", str(dev_model_dir)]
    )
    assert_shape(result, "remote_reference_over_ours_opd")
    remote = result["remote"]
    # The reference schedule is sequential: one teacher request, and one turn's m votes, at a time.
    assert remote["teacher_max_in_flight_reference"] == 1
    assert remote["judge_max_in_flight_reference"] == result["config"]["judge_m"]
    # Ours overlaps turns and rollouts.
    assert remote["teacher_max_in_flight_ours"] > 1
    assert remote["judge_max_in_flight_ours"] > result["config"]["judge_m"]
    n_turns = result["config"]["rollouts"] * result["config"]["turns_per_rollout"]
    assert remote["scored_turns_reference"] == remote["scored_turns_ours"] == n_turns
    assert remote["identical_rows_share"] == 1.0  # both schedules did exactly the same work
    assert remote["lower_bound_s"] <= remote["reference_opd_s"]


def test_payload_bench_on_a_groups_file(capsys, tmp_path):
    from hermes_opd.contract.rows import empty_rows
    from scoring.teacher_rows import normalize_row, place_turn_rows

    rng = random.Random(0)
    n, start, end, k = 300, 200, 260, 50
    tokens = [rng.randrange(4096) for _ in range(n)]
    masks = [-100] * start + tokens[start:end] + [-100] * (n - end)
    inference = [1.0] * start + [-0.5] * (end - start) + [1.0] * (n - end)
    ids_rows, lp_rows = empty_rows(n)
    turn_ids, turn_lps = [], []
    for pos in range(start, end):
        cand = rng.sample(range(4096), k)
        lps = sorted((math.log(rng.random() * 0.01 + 1e-6) for _ in range(k)), reverse=True)
        row = normalize_row(cand, lps, tokens[pos], -12.0, k)
        turn_ids.append(row[0])
        turn_lps.append(row[1])
    place_turn_rows(ids_rows, lp_rows, start, turn_ids, turn_lps)
    group = {
        "tokens": [tokens],
        "masks": [masks],
        "inference_logprobs": [inference],
        "scores": [1.0],
        "distill_token_ids": [ids_rows],
        "distill_logprobs": [lp_rows],
        "overrides": [{"opd": {"k": k}}],
    }
    path = tmp_path / "groups.jsonl"
    path.write_text(json.dumps(group) + "\n")
    result = run_bench(capsys, ["payload", "--quick", "--groups", str(path)])
    ratio = assert_shape(result, "raw_dense_over_ours")
    assert ratio > 2.0  # 60 scored positions out of 300
    assert result["float_format"]["excess_digit_values"] == 0
    assert result["float_format"]["float32_shortest_share"] == 1.0
    assert result["dense_k1"]["raw_bytes"] > 0 and result["scored_positions"] == end - start


def test_loss_bench_quick(capsys):
    result = run_bench(capsys, ["loss", "--quick", "--T", "64", "--V", "2000", "--K", "4", "--iters", "1"])
    assert_shape(result, "k_clones_peak_over_ours")
    assert set(result["variants"]) == {"ce", "ours", "k_clones"}


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("bwrap"), reason="needs root and bubblewrap")
def test_sandbox_bench_quick(capsys):
    result = run_bench(capsys, ["sandbox", "--quick", "--commands", "3"])
    assert_shape(result, "shell_over_bwrap_median")
    assert result["commands_per_builder"] == 3
    for builder in ("shell", "bwrap"):
        assert 0 < result[builder]["min_ms"] <= result[builder]["median_ms"] <= result[builder]["p95_ms"]


def test_bound_at_limits_counts_waves_of_the_configured_concurrency():
    from hermes_opd.bench.pipeline_bench import bound_at_limits

    service = [0.15] * 32
    assert bound_at_limits(0.3, service, 32, 32) == pytest.approx(0.45)  # one chain
    # 16 turns judged at a time (two judge waves), 8 teacher requests at a time (two per wave)
    assert bound_at_limits(0.3, service, 16, 8) == pytest.approx(0.9)
    assert bound_at_limits(0.3, service, 1, 1) == pytest.approx(31 * 0.3 + 0.3 + 0.15)
