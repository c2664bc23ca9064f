"""An atroposlib server class that speaks current, stock vLLM.

atroposlib 0.4.0's `VLLMServer` posts to a `/generate` route that vLLM no longer has, so its
`ManagedServer` token tracking and `get_logprobs` fail against `vllm serve`. `CurrentVLLMServer`
implements the same hooks on `/v1/completions` (token ids in; `return_token_ids`, `logprobs` and
`prompt_logprobs` out). Use it as `BaseEnv.server_cls`.

Differences from the base class, on purpose:
- only transient failures are retried; a wrong model name or a too-low `--max-logprobs` fails at
  once with a message that says what to change;
- an unreachable server fails after `health_wait_s` instead of waiting forever for health;
- `tokens_and_logprobs_completion(..., top_logprobs=K)` with K > 0 also returns the sampler's top-K
  rows of each sequence, as a fifth element `[(top_ids, top_logprobs), ...]` (n must stay within one
  request: atroposlib's split over several requests merges four elements only).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import openai
from atroposlib.envs.server_handling.server_baseline import APIServer, APIServerConfig, ReasoningConfig
from openai.types.chat.chat_completion import ChatCompletion
from openai.types.completion import Completion

from hermes_opd.vllm_api import http
from hermes_opd.vllm_api.client import RetryPolicy, VLLMCompletionsClient, root_url
from hermes_opd.vllm_api.errors import ServerUnreachableError, TransientServerError

DEFAULT_HEALTH_WAIT_S = 30.0


class CurrentVLLMServer(APIServer):
    """Atropos `APIServer` for stock vLLM (>= 0.10) via its OpenAI-compatible routes."""

    health_wait_s: float = DEFAULT_HEALTH_WAIT_S

    def __init__(self, config: APIServerConfig, reasoning_config: ReasoningConfig | None = None):
        self.openai = openai.AsyncClient(
            api_key=config.api_key or "EMPTY", base_url=config.base_url, timeout=config.timeout
        )
        self.client = VLLMCompletionsClient(
            base_url=config.base_url,
            model=config.model_name,
            api_key=config.api_key,
            timeout_s=float(config.timeout),
            retry=RetryPolicy(max_attempts=3),
        )
        self.tokenizer = None
        tokenizer_name = (
            config.model_name if config.tokenizer_name in (None, "", "none") else config.tokenizer_name
        )
        try:
            from transformers import AutoTokenizer

            self.tokenizer = AutoTokenizer.from_pretrained(tokenizer_name)
        except (OSError, ValueError):
            self.tokenizer = None  # only needed for text prompts; token-id callers don't need it
        self.last_health_error: str | None = None
        super().__init__(config, reasoning_config=reasoning_config)

    # -- health --------------------------------------------------------------------------------
    async def check_server_status_task(self, chat_completion: bool = True):
        url = f"{root_url(self.config.base_url)}/health"
        slow_checks = 0
        while True:
            try:
                answer = await http.request("GET", url, timeout_s=10)
                if answer.status >= 400:
                    raise TransientServerError(f"/health answered {answer.status}")
                self.server_healthy = True
                self.last_health_error = None
                slow_checks = 0
            except (ServerUnreachableError, TransientServerError) as exc:
                if isinstance(exc.__cause__, TimeoutError):
                    # A busy CPU server can be slow to answer /health; only repeated timeouts mean down.
                    slow_checks += 1
                    if slow_checks >= 3:
                        self.server_healthy = False
                        self.last_health_error = f"/health timed out {slow_checks} times in a row"
                else:
                    self.server_healthy = False
                    self.last_health_error = str(exc)
            await asyncio.sleep(1)

    def _ensure_started(self) -> None:
        if not self.initialized:
            if self.config.health_check and self.config.base_url is not None:
                self.check_task = asyncio.create_task(self.check_server_status_task())
            else:
                self.server_healthy = True
            self.initialized = True

    async def _wait_healthy(self) -> None:
        deadline = time.monotonic() + self.health_wait_s
        while not self.server_healthy:
            if time.monotonic() > deadline:
                raise ServerUnreachableError(
                    f"vLLM at {self.config.base_url} is not healthy after {self.health_wait_s:.0f}s "
                    f"({self.last_health_error or 'no answer from /health'}); is the server running and "
                    f"is `--openai.base_url` right?"
                )
            await asyncio.sleep(0.2)

    # -- text routes (plain OpenAI client) -----------------------------------------------------
    async def _chat_completion_wrapper(self, **kwargs) -> ChatCompletion:
        return await self.openai.chat.completions.create(**kwargs)

    async def _completion_wrapper(self, **kwargs) -> Completion:
        return await self.openai.completions.create(**kwargs)

    # -- token routes --------------------------------------------------------------------------
    def _prompt_ids(self, kwargs: dict[str, Any]) -> list[int]:
        if "input_ids" in kwargs:
            kwargs.pop("prompt", None)
            return list(kwargs.pop("input_ids"))
        prompt = kwargs.pop("prompt", None)
        if prompt is None:
            raise ValueError("pass `input_ids` (token ids) or `prompt` (text)")
        if self.tokenizer is None:
            raise ValueError(
                f"a text prompt needs a tokenizer, and none could be loaded for {self.config.tokenizer_name!r}; "
                "set `tokenizer_name` in the server config or pass `input_ids`"
            )
        return self.tokenizer.encode(prompt, add_special_tokens=False)

    async def _tokens_and_logprobs_completion_wrapper(self, **kwargs) -> tuple[list, list, list, list]:
        kwargs.pop("model", None)  # atroposlib always sets the configured name here
        adapter = kwargs.pop(
            "policy_model", None
        )  # the newest LoRA adapter (environments/delivery/policy_adapter.py)
        if adapter:
            kwargs["model"] = adapter
        prompt_ids = self._prompt_ids(kwargs)
        max_tokens = kwargs.pop("max_tokens", None) or kwargs.pop("max_new_tokens", None)
        max_tokens = max_tokens or kwargs.pop("max_completion_tokens", None) or 256
        n = int(kwargs.pop("n", 1))
        top_logprobs = int(kwargs.pop("top_logprobs", 0) or 0)
        sequences = await self.client.generate(
            prompt_ids,
            n=n,
            max_tokens=int(max_tokens),
            temperature=float(kwargs.pop("temperature", 1.0)),
            top_p=float(kwargs.pop("top_p", 1.0)),
            seed=kwargs.pop("seed", None),
            stop=kwargs.pop("stop", None),
            extra={k: v for k, v in kwargs.items() if k not in ("split",)},
            top_logprobs=top_logprobs,
        )
        result = (
            prompt_ids,
            [s.token_ids for s in sequences],
            [s.logprobs for s in sequences],
            [s.finish_reason for s in sequences],
        )
        if top_logprobs > 0:
            return (*result, [(s.top_ids, s.top_logprobs) for s in sequences])
        return result

    async def _get_logprobs_wrapper(self, **kwargs) -> dict[str, Any]:
        kwargs.pop("model", None)
        top_k = max(1, int(kwargs.pop("top_k", kwargs.pop("top_logprobs", 1))))
        prompt_ids = self._prompt_ids(kwargs)
        from scoring.request_paths import completions_prompt_topk  # the teacher's request code

        result = (await completions_prompt_topk(self.client, prompt_ids, top_k)).topk
        return {
            "prompt_tokens": result.prompt_ids,
            "prompt_topk_token_ids": result.token_ids,
            "prompt_topk_logprobs": result.logprobs,
        }

    # The base class wraps these in tenacity retries (3 attempts on any exception, even a wrong
    # model name) behind an unbounded wait for health. Ours: bounded wait, transient-only retries
    # (inside VLLMCompletionsClient), and the original exception type.
    async def _tokens_and_logprobs_comp(self, stat_dict, **kwargs):
        return await self._timed(stat_dict, self.sem, self._tokens_and_logprobs_completion_wrapper, kwargs)

    async def _tokens_and_logprobs_comp_eval(self, stat_dict, **kwargs):
        return await self._timed(
            stat_dict, self.eval_sem, self._tokens_and_logprobs_completion_wrapper, kwargs
        )

    async def _logprobs(self, stat_dict, **kwargs):
        return await self._timed(stat_dict, self.sem, self._get_logprobs_wrapper, kwargs)

    async def _logprobs_eval(self, stat_dict, **kwargs):
        return await self._timed(stat_dict, self.eval_sem, self._get_logprobs_wrapper, kwargs)

    async def _timed(self, stat_dict, semaphore, fn, kwargs):
        self._ensure_started()
        await self._wait_healthy()
        async with semaphore:
            stat_dict.setdefault("start", time.time())
            stat_dict["attempts"] = stat_dict.get("attempts", 0) + 1
            result = await fn(**kwargs)
            stat_dict["end"] = time.time()
            return result
