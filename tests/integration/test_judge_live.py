"""The LLM judges (hint and PRM) against the real dev vLLM: the tiny random model's votes are requests
that succeed and parse to nothing."""

from __future__ import annotations

import pytest

from judge.config import JudgeConfig
from judge.judge_turn import judge_turn
from judge.make_backend import make_judge_backend
from tests.support.judge_pairs import make_pair, pair_with, run_prm, tool


@pytest.mark.integration
async def test_real_dev_server_garbage_is_counted_unparsed(dev_server):
    # The dev model is a random tiny model: its text is garbage, so every vote must come back as a
    # successful request that parses to nothing, and no hint may be accepted. Small budgets keep the
    # prompt well inside the dev server's context window.
    config = JudgeConfig(
        backend="llm",
        base_url=dev_server.base_url,
        model=dev_server.model_name,
        m=3,
        max_tokens=32,
        timeout_s=60.0,
        max_retries=1,
        context_char_budget=400,
        turn_char_budget=200,
        next_state_char_budget=300,
    )
    backend = make_judge_backend(config)
    try:
        result = await judge_turn(make_pair(), backend, config)
    finally:
        await backend.aclose()
    assert result.outcome.n == 3
    assert not any(v.failed for v in result.votes), [v.error for v in result.votes]
    assert result.outcome.unparsed == 3
    assert not result.accepted and result.hint is None
    assert result.latency_s > 0
    assert result.as_dict()["latency_s"] > 0


@pytest.mark.integration
async def test_real_dev_server_prm_votes_parse_to_a_score(dev_server):
    # The dev model is a tiny random model: its answers hold no verdict, so every vote is a successful
    # request that parses to nothing and the score is 0 (no majority).
    config = JudgeConfig(
        backend="llm",
        base_url=dev_server.base_url,
        model=dev_server.model_name,
        m=3,
        max_tokens=32,
        timeout_s=60.0,
        max_retries=1,
        context_char_budget=400,
        turn_char_budget=200,
        next_state_char_budget=300,
    )
    result = await run_prm(config, pair_with(tool("Traceback (most recent call last):\nKeyError: 'x'")))
    assert not any(v.failed for v in result.votes), [v.error for v in result.votes]
    assert (result.outcome.n, result.outcome.unparsed, result.score) == (3, 3, 0)
    assert result.latency_s > 0
