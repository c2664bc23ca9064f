"""The one retry policy (hermes_opd/vllm_api/retry.py): tenacity's waits, 50-100% of the capped
exponential, and only the errors it is told to retry."""

from __future__ import annotations

import asyncio

import pytest
from tenacity import RetryCallState

from hermes_opd.vllm_api.retry import RetryPolicy, retrying


def _wait_s(policy: RetryPolicy, attempt: int) -> float:
    state = RetryCallState(None, None, (), {})
    state.attempt_number = attempt
    return policy.wait()(state)


@pytest.mark.parametrize(("attempt", "full"), [(1, 0.5), (2, 1.0), (3, 2.0), (5, 8.0), (9, 8.0)])
def test_each_wait_is_half_to_all_of_the_capped_exponential(attempt, full):
    waits = [_wait_s(RetryPolicy(base_delay_s=0.5, max_delay_s=8.0), attempt) for _ in range(400)]
    assert full / 2 - 1e-9 <= min(waits) and max(waits) <= full + 1e-9
    assert max(waits) - min(waits) > full / 4, "jittered"


def test_retrying_retries_what_it_is_told_and_raises_the_last():
    calls = []

    async def flaky():
        calls.append(1)
        raise ConnectionError(f"try {len(calls)}")

    policy = RetryPolicy(max_attempts=3, base_delay_s=0.001, max_delay_s=0.002)
    with pytest.raises(ConnectionError, match="try 3"):
        asyncio.run(retrying(flaky, policy, lambda e: isinstance(e, ConnectionError)))
    calls.clear()
    with pytest.raises(ConnectionError, match="try 1"):
        asyncio.run(retrying(flaky, policy, lambda e: False))
