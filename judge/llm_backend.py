"""LLM judge over any OpenAI-compatible chat-completions endpoint (I/O).

The m votes are m SEPARATE requests run together with `asyncio.gather`, not one request with `n=m`:
- each vote fails, times out and is retried on its own, so one slow or failed sample costs one vote,
  not all of them;
- not every OpenAI-compatible server accepts `n > 1` (several hosted APIs and reasoning models
  reject it), while every one accepts `n = 1`;
- on vLLM the repeated prompt is nearly free: automatic prefix caching reuses its KV blocks.

Requests go through `hermes_opd/vllm_api/chat_client.py`, a lean aiohttp client (the `openai` SDK cost ~7 ms of
CPU per vote; pass `client=openai.AsyncOpenAI(...)` to use the SDK instead). Retries are ours (an
SDK client must run with `max_retries=0`), so the policy is explicit:
timeouts, connection errors, 5xx and 429 are retried with exponential backoff and jitter (a 429's
`Retry-After`/`retry-after-ms` is honoured, capped by `retry_after_cap_s`); any other 4xx, and any
other error, is final for that vote. Every attempt has a hard wall-clock limit of `timeout_s`, and
all m votes of a turn, retries included, share the deadline `turn_deadline_s`: what is unfinished then
is cancelled and counts as a failed vote, while the finished votes still count.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Any

import openai

from hermes_opd.record.turn_pairs import TurnPair
from hermes_opd.vllm_api.chat_client import (
    APIConnectionError,
    ChatClient,
    ChatStatusError,
    MalformedResponseError,
)
from judge.backends import JudgeError, JudgeKind
from judge.config import JudgeConfig
from judge.parsing import Vote, parse_process_vote, parse_vote
from judge.prm_prompt import build_prm_prompt_from_config
from judge.prompt import JudgePrompt, build_judge_prompt_from_config

Sleep = Callable[[float], Awaitable[None]]
PromptBuilder = Callable[[TurnPair, JudgeConfig], JudgePrompt]
AnswerParser = Callable[[str, JudgeConfig], Vote]


def _parse_hint_vote(text: str, config: JudgeConfig) -> Vote:
    return parse_vote(text, config.min_hint_chars)


def _parse_process_vote(text: str, config: JudgeConfig) -> Vote:
    return parse_process_vote(text)


JUDGE_KINDS: dict[str, tuple[PromptBuilder, AnswerParser]] = {
    "hint": (build_judge_prompt_from_config, _parse_hint_vote),
    "prm": (build_prm_prompt_from_config, _parse_process_vote),
}
"""What each kind of judge asks and how its answers are read: `hint` (judge/prompt.py, a verdict and a
hint) and `prm`, the process-reward judge (judge/prm_prompt.py, a +1 / 0 / -1 verdict)."""


__all__ = [
    "LLMJudgeBackend",
    "LLMJudgeStats",
    "MalformedResponseError",
    "backoff_seconds",
    "retry_after_seconds",
    "retry_delay",
]


@dataclass
class LLMJudgeStats:
    """Counters over the backend's life, for metrics."""

    requests: int = 0
    retries: int = 0
    failed_votes: int = 0
    all_failed_turns: int = 0


def retry_after_seconds(headers: Any) -> float | None:
    """Seconds a server asked us to wait (`retry-after-ms`, or `retry-after` as seconds or a date)."""
    if headers is None:
        return None
    millis = headers.get("retry-after-ms")
    if millis is not None:
        try:
            return max(0.0, float(millis) / 1000.0)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
    except (TypeError, ValueError):
        return None


def backoff_seconds(config: JudgeConfig, attempt: int, jitter: float) -> float:
    """Exponential backoff for retry number `attempt` (0-based); `jitter` in [0, 1) scales it into
    [50%, 100%) of the nominal delay so concurrent votes do not retry in lockstep."""
    nominal = min(config.backoff_max_s, config.backoff_base_s * (2**attempt))
    return nominal * (0.5 + 0.5 * jitter)


def retry_delay(exc: BaseException, attempt: int, config: JudgeConfig, jitter: float) -> float | None:
    """How long to wait before retrying after `exc`, or None if it must not be retried."""
    if isinstance(exc, openai.APIStatusError | ChatStatusError):
        status = exc.status_code
        if status == 429:
            headers = exc.headers if isinstance(exc, ChatStatusError) else exc.response.headers
            asked = retry_after_seconds(headers)
            if asked is not None:
                return min(asked, config.retry_after_cap_s)
            return backoff_seconds(config, attempt, jitter)
        if status >= 500:
            return backoff_seconds(config, attempt, jitter)
        return None
    if isinstance(exc, openai.APIConnectionError | APIConnectionError | TimeoutError):  # SDK timeouts too
        return backoff_seconds(config, attempt, jitter)
    return None


def describe_error(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return "TimeoutError: no answer within timeout_s"
    text = str(exc).strip().replace("\n", " ")
    return f"{type(exc).__name__}: {text[:300]}" if text else type(exc).__name__


class LLMJudgeBackend:
    """m concurrent chat-completion votes per turn pair, asked and parsed as `kind` says
    (`JUDGE_KINDS`: the hint judge by default, `prm` for the process-reward judge)."""

    name = "llm"

    def __init__(
        self,
        config: JudgeConfig,
        *,
        base_url: str,
        model: str,
        api_key: str = "EMPTY",
        client: openai.AsyncOpenAI | None = None,
        sleep: Sleep = asyncio.sleep,
        jitter: Callable[[], float] = random.random,
        kind: JudgeKind = "hint",
    ) -> None:
        self.config = config
        self.kind = kind
        self._build_prompt, self._parse = JUDGE_KINDS[kind]
        self.base_url = base_url
        self.model = model
        self.client = client
        """An `openai.AsyncOpenAI` passed in (with max_retries=0), else None: the lean client."""
        self.chat = ChatClient(base_url, api_key) if client is None else None
        self.stats = LLMJudgeStats()
        self._sleep = sleep
        self._jitter = jitter

    async def collect_votes(self, pair: TurnPair) -> list[Vote]:
        messages = self._build_prompt(pair, self.config).as_messages()
        votes = await self.votes_within_deadline(messages)
        if all(v.failed for v in votes):
            self.stats.all_failed_turns += 1
            errors = [v.error or "" for v in votes]
            raise JudgeError(f"all {len(votes)} judge votes failed; first error: {errors[0]}", errors)
        return votes

    async def votes_within_deadline(self, messages: list[dict[str, str]]) -> list[Vote]:
        """m concurrent votes; those unfinished at `turn_deadline_s` are cancelled and count as failed."""
        tasks = [asyncio.create_task(self.vote(messages)) for _ in range(self.config.m)]
        try:
            done, pending = await asyncio.wait(tasks, timeout=self.config.turn_deadline_s)
        finally:
            for task in tasks:  # also when we are cancelled ourselves: no vote outlives the turn
                if not task.done():
                    task.cancel()
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)
            self.stats.failed_votes += len(pending)
        deadline_error = f"TurnDeadline: no answer within turn_deadline_s={self.config.turn_deadline_s}"
        return [task.result() if task in done else Vote.failure(deadline_error) for task in tasks]

    async def vote(self, messages: list[dict[str, str]]) -> Vote:
        """One vote: a completion (with retries) parsed, or `Vote.failure` if it could not be had."""
        try:
            text = await self.complete_with_retries(messages)
        except Exception as exc:  # every failure of one vote is that vote's; cancellation still propagates
            self.stats.failed_votes += 1
            return Vote.failure(describe_error(exc))
        return self._parse(text, self.config)

    async def complete_with_retries(self, messages: list[dict[str, str]]) -> str:
        attempt = 0
        while True:
            try:
                return await self.complete_once(messages)
            except Exception as exc:
                delay = retry_delay(exc, attempt, self.config, self._jitter())
                if delay is None or attempt >= self.config.max_retries:
                    raise
            attempt += 1
            self.stats.retries += 1
            await self._sleep(delay)

    async def complete_once(self, messages: list[dict[str, str]]) -> str:
        self.stats.requests += 1
        if self.chat is not None:
            payload: dict[str, Any] = {
                "model": self.model,
                "messages": messages,
                "temperature": self.config.temperature,
                "max_tokens": self.config.max_tokens,
                "n": 1,
                **(self.config.extra_body or {}),
            }
            return await asyncio.wait_for(self.chat.complete(payload), timeout=self.config.timeout_s)
        assert self.client is not None
        request = self.client.chat.completions.create(
            model=self.model,
            messages=messages,  # type: ignore[arg-type]
            temperature=self.config.temperature,
            max_tokens=self.config.max_tokens,
            n=1,
            extra_body=self.config.extra_body or None,
        )
        response = await asyncio.wait_for(request, timeout=self.config.timeout_s)
        choices = getattr(response, "choices", None)
        if choices is None:  # the SDK hands back a non-JSON body as a plain string
            raise MalformedResponseError(f"not a chat completion: {str(response)[:200]!r}")
        if not choices:
            return ""
        return choices[0].message.content or ""

    async def aclose(self) -> None:
        if self.chat is not None:
            await self.chat.close()
        if self.client is not None:
            await self.client.close()
