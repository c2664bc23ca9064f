"""The teacher scorer: one vLLM request per turn (prompt_logprobs=K, max_tokens=1), bounded
concurrency, per-call timeout, and a one-time tokenizer check against the teacher endpoint."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Any

import aiohttp

from hermes_opd.contract.errors import HermesOPDError
from hermes_opd.vllm_api.client import VLLMCompletionsClient, root_url
from hermes_opd.vllm_api.wire_format import PromptTopK

logger = logging.getLogger(__name__)

TOKENIZER_PROBE = (
    "def f(x):\n    return {'a': [1, 2.5, None]}  # héllo wörld ✓ 数学\n<tool_call>\n"
    '{"name": "terminal", "arguments": {"command": "ls -la"}}\n</tool_call>'
)


class TeacherTokenizerMismatchError(HermesOPDError, RuntimeError):
    """The teacher endpoint tokenizes differently from the policy: its logprobs would score other tokens."""


@dataclass
class TeacherCallStats:
    latency_s: float
    prompt_tokens: int


class TeacherScorer:
    """Scores teacher inputs through vLLM prompt logprobs."""

    def __init__(
        self, client: VLLMCompletionsClient, k: int = 50, concurrency: int = 8, timeout_s: float = 120.0
    ):
        if k < 1:
            raise ValueError(f"distill top-k must be >= 1, got {k}")
        self.client = client
        self.k = k
        self.timeout_s = timeout_s
        self.semaphore = asyncio.Semaphore(concurrency)

    async def score(self, ids: list[int], from_pos: int = 0) -> tuple[PromptTopK, TeacherCallStats]:
        """Teacher top-K rows for `ids`; rows before `from_pos` (the context) are not parsed."""
        async with self.semaphore:
            started = time.perf_counter()
            async with asyncio.timeout(self.timeout_s):
                result = await self.client.prompt_topk(ids, self.k, from_pos=from_pos)
            return result, TeacherCallStats(time.perf_counter() - started, len(ids))

    async def check_tokenizer(self, tokenizer: Any) -> None:
        """Refuse a teacher whose tokenizer differs from the policy's (vLLM `/tokenize`, `/detokenize`).

        Raises TeacherTokenizerMismatchError on a mismatch; logs a warning when the endpoint has no
        tokenize route (not vLLM), since then the check cannot be made."""
        base = root_url(self.client.base_url)
        local = tokenizer.encode(TOKENIZER_PROBE, add_special_tokens=False)
        vocab = len(tokenizer)
        sample = sorted({0, 1, vocab // 3, vocab // 2, vocab - 1, *local})
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session:
            try:
                async with session.post(
                    f"{base}/tokenize",
                    json={"model": self.client.model, "prompt": TOKENIZER_PROBE, "add_special_tokens": False},
                ) as response:
                    if response.status == 404:
                        logger.warning("teacher at %s has no /tokenize route; tokenizer not verified", base)
                        return
                    body = await response.json(content_type=None)
                remote = body.get("tokens")
                async with session.post(
                    f"{base}/detokenize", json={"model": self.client.model, "tokens": sample}
                ) as response:
                    detok = (await response.json(content_type=None)).get("prompt")
            except aiohttp.ClientError as exc:
                raise TeacherTokenizerMismatchError(
                    f"could not check the teacher tokenizer at {base}: {exc}"
                ) from exc
        if remote != local:
            raise TeacherTokenizerMismatchError(
                f"teacher at {base} (model {self.client.model!r}) tokenizes a probe string into "
                f"{len(remote or [])} ids, the policy tokenizer into {len(local)}; OPD needs the same tokenizer"
            )
        expected = tokenizer.decode(sample, skip_special_tokens=False)
        if detok is not None and detok != expected:
            raise TeacherTokenizerMismatchError(
                f"teacher at {base} decodes ids {sample[:6]}... differently from the policy tokenizer; "
                "OPD needs the same vocabulary"
            )
