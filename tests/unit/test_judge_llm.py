"""The LLM judge backend.

Fault tests run against a local fake OpenAI-compatible server (aiohttp): timeouts, 5xx, 429 with
Retry-After and 4xx are faults a real server cannot produce on demand. The happy path against a real
vLLM server is in tests/integration/test_judge_live.py.
"""

from __future__ import annotations

import asyncio
import time
from email.utils import formatdate
from types import SimpleNamespace
from typing import Any

import openai
import pytest

from hermes_opd.vllm_api.endpoint import Endpoint
from judge.backends import JudgeError
from judge.config import JudgeConfig
from judge.judge_turn import judge_turn
from judge.llm_backend import LLMJudgeBackend, backoff_seconds, retry_after_seconds, retry_delay
from judge.make_backend import make_judge_backend
from tests.support.fake_openai import HINT, FakeOpenAI
from tests.support.judge_pairs import make_pair
from tests.support.waiting import wait_for

NEGATIVE = "The command just worked.\n\\boxed{-1}"


def make_config(fake: FakeOpenAI, **overrides: Any) -> JudgeConfig:
    settings: dict[str, Any] = {
        "backend": "llm",
        "base_url": fake.base_url,
        "model": "fake-judge",
        "m": 3,
        "timeout_s": 5.0,
        "max_retries": 2,
        "backoff_base_s": 0.01,
        "backoff_max_s": 0.05,
    }
    settings.update(overrides)
    return JudgeConfig(**settings)


async def run_judge(config: JudgeConfig):
    backend = make_judge_backend(config)
    try:
        return await judge_turn(make_pair(), backend, config), backend
    finally:
        await backend.aclose()


async def test_happy_path_sends_m_separate_requests(fake_server):
    config = make_config(fake_server, temperature=0.7, max_tokens=777)
    result, backend = await run_judge(config)
    assert result.accepted and result.hint == HINT
    assert (result.outcome.positive, result.outcome.unparsed) == (3, 0)
    assert result.latency_s > 0 and result.backend == "llm"
    assert len(fake_server.requests) == 3
    body = fake_server.requests[0][1]
    assert body["model"] == "fake-judge" and body["temperature"] == 0.7
    assert body["max_tokens"] == 777 and body.get("n", 1) == 1
    assert [m["role"] for m in body["messages"]] == ["system", "user"]
    assert "KeyError: 'port'" in body["messages"][1]["content"]
    assert backend.stats.requests == 3 and backend.stats.retries == 0


async def test_timeout_costs_one_vote_and_the_others_still_count(fake_server):
    fake_server.actions = [fake_server.hang()]
    config = make_config(fake_server, timeout_s=0.4, max_retries=0)
    started = time.perf_counter()
    result, backend = await run_judge(config)
    assert time.perf_counter() - started < 3.0
    failed = [v for v in result.votes if v.failed]
    assert len(failed) == 1 and "Timeout" in failed[0].error
    assert (result.outcome.positive, result.outcome.negative, result.outcome.unparsed) == (2, 0, 1)
    assert result.accepted and result.hint == HINT
    assert backend.stats.failed_votes == 1


async def test_turn_deadline_keeps_the_finished_votes(fake_server):
    fake_server.actions = [fake_server.hang()]
    config = make_config(fake_server, m=3, timeout_s=10.0, turn_deadline_s=0.5)
    started = time.perf_counter()
    result, backend = await run_judge(config)
    assert time.perf_counter() - started < 3.0
    (late,) = [v for v in result.votes if v.failed]
    assert "TurnDeadline" in late.error
    assert result.outcome.positive == 2 and result.accepted
    assert backend.stats.failed_votes == 1


async def test_cancelling_the_judge_cancels_its_requests(fake_server):
    fake_server.default = fake_server.hang()
    config = make_config(fake_server, m=3, timeout_s=10.0, turn_deadline_s=None)
    backend = make_judge_backend(config)
    task = asyncio.create_task(judge_turn(make_pair(), backend, config))
    await wait_for(lambda: len(fake_server.requests) == 3, 10, "the judge did not send its 3 votes")
    before = [t for t in asyncio.all_tasks() if t.get_coro().__qualname__ == "LLMJudgeBackend.vote"]
    assert len(before) == 3
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await wait_for(lambda: all(t.done() for t in before), 5, "a vote outlived the cancelled judge")
    await backend.aclose()


async def test_timeout_is_retried_when_retries_are_allowed(fake_server):
    fake_server.actions = [fake_server.hang()]
    config = make_config(fake_server, m=1, timeout_s=0.3, max_retries=1)
    result, backend = await run_judge(config)
    assert result.accepted and len(fake_server.requests) == 2 and backend.stats.retries == 1


async def test_500_then_success_is_retried(fake_server):
    fake_server.actions = [fake_server.status(500)]
    config = make_config(fake_server, m=1)
    result, backend = await run_judge(config)
    assert result.accepted and result.outcome.positive == 1
    assert len(fake_server.requests) == 2
    assert backend.stats.retries == 1 and backend.stats.failed_votes == 0


async def test_429_retry_after_is_honoured(fake_server):
    fake_server.actions = [fake_server.status(429, {"Retry-After": "1"})]
    config = make_config(fake_server, m=1, backoff_base_s=0.0, backoff_max_s=0.0)
    result, _ = await run_judge(config)
    assert result.accepted
    assert len(fake_server.requests) == 2
    assert fake_server.gaps()[0] >= 0.95


async def test_429_retry_after_is_capped(fake_server):
    fake_server.actions = [fake_server.status(429, {"Retry-After": "120"})]
    config = make_config(fake_server, m=1, retry_after_cap_s=0.2)
    started = time.perf_counter()
    result, _ = await run_judge(config)
    assert result.accepted
    assert 0.15 <= fake_server.gaps()[0] < 2.0
    assert time.perf_counter() - started < 3.0


@pytest.mark.parametrize("code", [400, 401, 404, 422])
async def test_other_4xx_is_never_retried(fake_server, code):
    fake_server.default = fake_server.status(code)
    config = make_config(fake_server, m=2, max_retries=3)
    with pytest.raises(JudgeError) as info:
        await run_judge(config)
    assert len(fake_server.requests) == 2  # one attempt per vote, no retries
    assert len(info.value.errors) == 2


async def test_all_votes_failing_raises_judge_error_with_latency(fake_server):
    fake_server.default = fake_server.status(503)
    config = make_config(fake_server, m=3, max_retries=1)
    backend = make_judge_backend(config)
    with pytest.raises(JudgeError) as info:
        await judge_turn(make_pair(), backend, config)
    await backend.aclose()
    assert len(fake_server.requests) == 6  # 3 votes x (1 try + 1 retry)
    assert len(info.value.errors) == 3 and all("InternalServerError" in e for e in info.value.errors)
    assert info.value.latency_s is not None and info.value.latency_s > 0
    assert backend.stats.all_failed_turns == 1


async def test_some_votes_failing_is_not_an_error(fake_server):
    fake_server.actions = [fake_server.status(400), fake_server.status(400)]
    config = make_config(fake_server, m=3)
    result, _ = await run_judge(config)
    assert result.outcome.unparsed == 2 and result.outcome.positive == 1
    assert not result.accepted  # 1 of 3 requested is no majority: a failed vote counts as not-yes
    assert result.as_dict()["failed_requests"] == 2 and result.as_dict()["failed"] == 2
    fake_server.actions = [fake_server.status(400), fake_server.status(400)]
    result, _ = await run_judge(make_config(fake_server, m=3, vote_policy="majority_of_parsed"))
    assert result.accepted  # the earlier rule: 1 of 1 parseable vote


async def test_garbage_text_is_unparsed_not_failed(fake_server):
    fake_server.default = fake_server.reply("lorem ipsum \\boxed{maybe} [HINT_START]dolor sit amet")
    config = make_config(fake_server)
    result, _ = await run_judge(config)
    assert result.outcome.unparsed == 3 and not any(v.failed for v in result.votes)
    assert not result.accepted and result.hint is None


async def test_null_content_is_unparsed(fake_server):
    fake_server.default = fake_server.reply(None)
    result, _ = await run_judge(make_config(fake_server, m=2))
    assert result.outcome.unparsed == 2 and not any(v.failed for v in result.votes)


async def test_non_json_body_fails_the_vote_without_hanging(fake_server):
    fake_server.actions = [fake_server.not_json()]
    result, _ = await run_judge(make_config(fake_server, m=2, max_retries=0))
    assert result.outcome.n == 2 and result.outcome.positive == 1
    (failed,) = [v for v in result.votes if v.failed]
    assert "MalformedResponseError" in failed.error and "proxy error" in failed.error
    assert len(fake_server.requests) == 2  # not retried


async def test_majority_across_real_requests(fake_server):
    fake_server.actions = [fake_server.reply(NEGATIVE), fake_server.reply(NEGATIVE)]
    result, _ = await run_judge(make_config(fake_server, m=3))
    assert (result.outcome.positive, result.outcome.negative) == (1, 2)
    assert not result.accepted
    result_any, _ = await run_judge(make_config(fake_server, m=3, vote_policy="any"))
    assert result_any.accepted  # the reference policy: default replies are all positive now


async def test_connection_refused_raises_judge_error():
    config = JudgeConfig(
        base_url="http://127.0.0.1:9/v1", model="x", m=2, max_retries=1, backoff_base_s=0.01, timeout_s=2
    )
    with pytest.raises(JudgeError) as info:
        await run_judge(config)
    assert all("Connection" in e for e in info.value.errors)


def test_retry_policy_pure():
    config = JudgeConfig(backoff_base_s=1.0, backoff_max_s=5.0, retry_after_cap_s=10.0)
    assert backoff_seconds(config, 0, jitter=0.0) == 0.5
    assert backoff_seconds(config, 2, jitter=0.999) == pytest.approx(4.0, rel=1e-2)
    assert backoff_seconds(config, 10, jitter=0.0) == 2.5  # capped at backoff_max_s, then jittered

    def status_error(code: int, headers: dict[str, str] | None = None) -> openai.APIStatusError:
        # The SDK's error without its constructor: what it builds from a response (and which HTTP
        # library it takes) differs between SDK versions; retry_delay reads only these two fields.
        error = openai.APIStatusError.__new__(openai.APIStatusError)
        error.status_code, error.response = code, SimpleNamespace(status_code=code, headers=headers or {})
        return error

    assert retry_delay(status_error(429, {"retry-after": "3"}), 0, config, 0.0) == 3.0
    assert retry_delay(status_error(429, {"retry-after": "60"}), 0, config, 0.0) == 10.0
    assert retry_delay(status_error(429), 0, config, 0.0) == 0.5
    assert retry_delay(status_error(502), 1, config, 0.0) == 1.0
    assert retry_delay(status_error(400), 0, config, 0.0) is None
    assert retry_delay(status_error(408), 0, config, 0.0) is None
    assert retry_delay(TimeoutError(), 0, config, 0.0) == 0.5
    assert retry_delay(ValueError("bad"), 0, config, 0.0) is None


def test_retry_after_header_forms():
    assert retry_after_seconds({"retry-after": "2.5"}) == 2.5
    assert retry_after_seconds({"retry-after-ms": "1500"}) == 1.5
    assert retry_after_seconds({"retry-after": formatdate(time.time() + 30, usegmt=True)}) == pytest.approx(
        30, abs=2
    )
    assert retry_after_seconds({"retry-after": "soon"}) is None
    assert retry_after_seconds({}) is None


def test_factory_uses_the_resolved_server_else_the_config_own():
    config = JudgeConfig(backend="llm")
    backend = make_judge_backend(config, Endpoint("http://127.0.0.1:8000/v1", "policy", "sk-p"))
    assert isinstance(backend, LLMJudgeBackend)
    assert backend.base_url == "http://127.0.0.1:8000/v1" and backend.model == "policy"
    assert backend.chat.headers["Authorization"] == "Bearer sk-p"
    own = make_judge_backend(JudgeConfig(base_url="http://127.0.0.1:9000/v1", model="judge"))
    assert own.base_url == "http://127.0.0.1:9000/v1" and own.model == "judge"  # type: ignore[attr-defined]
    assert "Authorization" not in own.chat.headers  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="the llm judge needs a base_url and a model"):
        make_judge_backend(config)


def test_api_key_resolution(monkeypatch):
    assert JudgeConfig().resolved_api_key() == "EMPTY"
    monkeypatch.setenv("MY_JUDGE_KEY", "from-env")
    assert JudgeConfig(api_key_env="MY_JUDGE_KEY").resolved_api_key() == "from-env"
    assert JudgeConfig(api_key="direct", api_key_env="MY_JUDGE_KEY").resolved_api_key() == "direct"
