"""Every teacher path gives the rows of an independent transformers pass, against the real dev vLLM;
`auto` picks the fast path there and falls back to `completions` on a real server started without
`--enable-scale-out`."""

from __future__ import annotations

import asyncio
import json
import logging

import aiohttp
import pytest

from hermes_opd.vllm_api.client import VLLMCompletionsClient
from scoring import response_parsing
from scoring.alignment import AlignmentError
from scoring.request_paths import GENERATE_PATH, completions_payload, generate_payload
from scoring.response_parsing import parse_prompt_topk
from scoring.teacher import TeacherScorer
from tests.support.oracle import full_logprobs

pytestmark = pytest.mark.integration

K = 50
TEXT = (
    "def merge_intervals(intervals):\n    result = []\n    for start, end in sorted(intervals):\n"
    "        if result and start <= result[-1][1]:\n            result[-1][1] = max(result[-1][1], end)\n"
    "        else:\n            result.append([start, end])\n    return result\n"
)


def teacher_input(tokenizer, n_tokens: int, turn: int, shift: int = 0) -> tuple[list[int], int]:
    ids: list[int] = []
    while len(ids) < n_tokens + shift:
        ids.extend(tokenizer.encode(TEXT, add_special_tokens=False))
    ids = ids[shift : shift + n_tokens]
    return ids, n_tokens - turn


def assert_oracle_rows(model, ids: list[int], prompt_len: int, ids_rows, lp_rows) -> int:
    """Rows of positions [prompt_len, len(ids)) against a float32 transformers pass: top-K sets,
    order, values within 1e-4, the student's token as entry K+1 when outside. Returns how many rows
    needed that entry."""
    oracle = full_logprobs(model, ids)
    assert len(ids_rows) == len(lp_rows) == len(ids) - prompt_len
    outside = 0
    for j, (row_ids, row_lps) in enumerate(zip(ids_rows, lp_rows, strict=True)):
        pos = prompt_len + j
        top = oracle[pos].topk(K)
        assert set(row_ids[:K]) == set(top.indices.tolist()), f"top-{K} set differs at {pos}"
        assert row_lps[:K] == sorted(row_lps[:K], reverse=True)
        for tok, lp in zip(row_ids, row_lps, strict=True):
            assert abs(lp - float(oracle[pos, tok])) <= 1e-4, (pos, tok, lp, float(oracle[pos, tok]))
        if ids[pos] in row_ids[:K]:
            assert len(row_ids) == K
        else:
            outside += 1
            assert len(row_ids) == K + 1 and row_ids[K] == ids[pos]
    return outside


def scorer(server, path: str, model_dir=None) -> TeacherScorer:
    client = VLLMCompletionsClient(server.base_url, server.model_name, timeout_s=120)
    return TeacherScorer(client, k=K, path=path, local_model_dir=str(model_dir) if model_dir else None)


@pytest.mark.parametrize("path", ["completions", "generate", "transformers"])
async def test_every_path_gives_the_transformers_rows(
    path, dev_server, dev_tokenizer, reference_model, dev_model_dir
):
    teacher = scorer(dev_server, path, dev_model_dir if path == "transformers" else None)
    inputs = [teacher_input(dev_tokenizer, n, turn, shift) for n, turn, shift in [(400, 60, 0), (250, 30, 7)]]
    try:
        scored = await asyncio.gather(*(teacher.score_turn(ids, p, ids[p:]) for ids, p in inputs))
    finally:
        await teacher.aclose()
    outside = 0
    for (ids, prompt_len), turn in zip(inputs, scored, strict=True):
        assert turn.stats.path == path
        outside += assert_oracle_rows(reference_model, ids, prompt_len, turn.ids_rows, turn.lp_rows)
        if path == "transformers":
            assert turn.stats.body_bytes == 0
        else:
            assert turn.stats.body_bytes > 1000
    assert outside > 0  # the K+1 entry was exercised
    if path == "transformers":
        assert teacher.local is not None and teacher.local.batches == 1  # both turns in one forward pass


async def test_paths_agree_with_each_other_and_refuse_foreign_turn_ids(
    dev_server, dev_tokenizer, dev_model_dir
):
    ids, prompt_len = teacher_input(dev_tokenizer, 300, 40)
    rows = {}
    for path in ("completions", "generate", "transformers"):
        teacher = scorer(dev_server, path, dev_model_dir if path == "transformers" else None)
        try:
            turn = await teacher.score_turn(ids, prompt_len, ids[prompt_len:])
            with pytest.raises(AlignmentError):
                await teacher.score_turn(ids, prompt_len, [t + 1 for t in ids[prompt_len:]])
        finally:
            await teacher.aclose()
        rows[path] = turn
    # The two vLLM routes build their rows from the same engine output: identical.
    assert rows["generate"].ids_rows == rows["completions"].ids_rows
    assert rows["generate"].lp_rows == rows["completions"].lp_rows
    # Same bytes per row apart from the decoded strings: generate's body is smaller.
    assert rows["generate"].stats.body_bytes < rows["completions"].stats.body_bytes


@pytest.mark.parametrize("route", ["completions", "generate"])
async def test_real_vllm_bodies_are_read_from_their_end(route, dev_server, dev_tokenizer):
    """The byte patterns the tail reader relies on are vLLM's own: on real bodies of both routes it
    finds the turn's rows without falling back, and they equal the whole-body parse."""
    ids, prompt_len = teacher_input(dev_tokenizer, 400, 60, shift=3)
    root = dev_server.base_url.removesuffix("/v1")
    url, payload = (
        (root + GENERATE_PATH, generate_payload(dev_server.model_name, ids, K))
        if route == "generate"
        else (dev_server.base_url + "/completions", completions_payload(dev_server.model_name, ids, K))
    )
    async with aiohttp.ClientSession() as session, session.post(url, json=payload) as response:
        assert response.status == 200
        raw = await response.read()
    tail = response_parsing._tail_prompt_topk(raw, ids, K, prompt_len, route)
    assert tail == parse_prompt_topk(json.loads(raw), ids, K, from_pos=prompt_len, route=route)
    assert sum(1 for row in tail.token_ids if row) == 60


async def test_the_teacher_holds_its_position_budget_against_the_real_server(
    dev_server, dev_tokenizer, reference_model
):
    """Six turns of 300 positions under a 700-position budget: never more than two in flight (a
    spy around the real client's post counts them), and every turn still gets its exact rows."""
    client = VLLMCompletionsClient(dev_server.base_url, dev_server.model_name, timeout_s=120)
    teacher = TeacherScorer(client, k=K, path="generate", concurrency=32, max_positions_in_flight=700)
    in_flight = peak = 0
    post = client.post

    async def counting_post(*args, **kwargs):
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        try:
            return await post(*args, **kwargs)
        finally:
            in_flight -= 1

    client.post = counting_post
    inputs = [teacher_input(dev_tokenizer, 300, 30, shift) for shift in range(6)]
    try:
        await teacher.choose_path()
        scored = await asyncio.gather(*(teacher.score_turn(ids, p, ids[p:]) for ids, p in inputs))
    finally:
        await teacher.aclose()
    assert peak == 2
    assert teacher.positions.in_use == 0
    for (ids, prompt_len), turn in zip(inputs, scored, strict=True):
        assert_oracle_rows(reference_model, ids, prompt_len, turn.ids_rows, turn.lp_rows)


async def test_auto_picks_generate_on_the_dev_server(dev_server, dev_tokenizer, caplog):
    teacher = scorer(dev_server, "auto")
    ids, prompt_len = teacher_input(dev_tokenizer, 120, 20)
    with caplog.at_level(logging.INFO, logger="scoring.teacher"):
        try:
            choice = await teacher.choose_path()
            turn = await teacher.score_turn(ids, prompt_len, ids[prompt_len:])
            await teacher.choose_path()  # settled once: no second probe, no second line
        finally:
            await teacher.aclose()
    assert choice.path == "generate" and turn.stats.path == "generate"
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("teacher path:")]
    assert len(lines) == 1 and lines[0].startswith("teacher path: generate (auto: the server answers")


async def test_auto_with_a_local_model_scores_in_process(dev_server, dev_tokenizer, dev_model_dir):
    teacher = scorer(dev_server, "auto", dev_model_dir)
    ids, prompt_len = teacher_input(dev_tokenizer, 120, 20)
    try:
        turn = await teacher.score_turn(ids, prompt_len, ids[prompt_len:])
    finally:
        await teacher.aclose()
    assert turn.stats.path == "transformers" and len(turn.ids_rows) == 20


async def test_auto_falls_back_to_completions_without_scale_out(
    plain_dev_server, dev_tokenizer, reference_model, caplog
):
    """`plain_dev_server` (tests/conftest.py): a second vLLM without --enable-scale-out."""
    teacher = scorer(plain_dev_server, "auto")
    ids, prompt_len = teacher_input(dev_tokenizer, 200, 30)
    with caplog.at_level(logging.INFO, logger="scoring.teacher"):
        try:
            turn = await teacher.score_turn(ids, prompt_len, ids[prompt_len:])
        finally:
            await teacher.aclose()
    assert teacher.choice is not None and teacher.choice.path == "completions"
    assert turn.stats.path == "completions"
    (record,) = [r for r in caplog.records if r.getMessage().startswith("teacher path:")]
    line = record.getMessage()
    assert record.levelname == "WARNING"  # visible at `hermes-opd process`'s default log level
    # vLLM 0.32 answers 403 "Scale-out endpoints are disabled. Restart vllm serve with --enable-scale-out"
    assert "HTTP 403" in line and "Scale-out endpoints are disabled" in line, line
    assert_oracle_rows(reference_model, ids, prompt_len, turn.ids_rows, turn.lp_rows)
