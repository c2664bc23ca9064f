"""The teacher scorer: a turn's teacher input in, the turn's contract rows out.

One request per turn on the chosen path (`scoring/path_choice.py`: `transformers` in-process,
`generate` or `completions` against vLLM), bounded concurrency (requests, and prompt positions in
flight: `scoring/position_budget.py`), a per-call timeout, the turn's ids checked against the
student's, and a one-time tokenizer check (against the teacher endpoint, or the in-process
teacher's own tokenizer files). The path is chosen once, on first use or by `choose_path()` at
startup, and logged in one line."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Any

from hermes_opd.contract.errors import HermesOPDError
from hermes_opd.contract.rows import Rows
from hermes_opd.contract.student_topk import teacher_logprobs_on
from hermes_opd.vllm_api import http
from hermes_opd.vllm_api.client import VLLMCompletionsClient, root_url
from hermes_opd.vllm_api.errors import ServerUnreachableError, TransientServerError
from scoring.alignment import AlignmentError, turn_rows
from scoring.path_choice import PathChoice, choose_path, probe_generate
from scoring.position_budget import PositionBudget
from scoring.request_paths import completions_prompt_topk, generate_prompt_topk
from scoring.transformers_scorer import TransformersTeacher

logger = logging.getLogger(__name__)

TOKENIZER_PROBE = (
    "def f(x):\n    return {'a': [1, 2.5, None]}  # héllo wörld ✓ 数学\n<tool_call>\n"
    '{"name": "terminal", "arguments": {"command": "ls -la"}}\n</tool_call>'
)


def _policy_probe(tokenizer: Any) -> tuple[list[int], list[int]]:
    """The policy's ids for `TOKENIZER_PROBE`, and the ids whose decoding the teacher must match
    (both ends of the vocabulary, two points between, and the probe's own)."""
    ids = tokenizer.encode(TOKENIZER_PROBE, add_special_tokens=False)
    vocab = len(tokenizer)
    return ids, sorted({0, 1, vocab // 3, vocab // 2, vocab - 1, *ids})


class TeacherTokenizerMismatchError(HermesOPDError, RuntimeError):
    """The teacher endpoint tokenizes differently from the policy: its logprobs would score other tokens."""


@dataclass
class TeacherCallStats:
    latency_s: float
    prompt_tokens: int
    path: str = "completions"
    body_bytes: int = 0
    """Bytes of the response body (0 for the in-process path, which has none)."""


@dataclass
class TurnScore:
    ids_rows: list[list[int]]
    lp_rows: list[list[float]]
    stats: TeacherCallStats
    student_topk_teacher: list[list[float | None]] | None = None
    """With the student's top-K ids asked for: the teacher's logprob of each, parallel to them. Exact on
    the in-process path; on a vLLM path read from the row (its top-K plus the sampled token), None
    where the row does not hold the id (unknown, never invented)."""


class TeacherScorer:
    """Scores teacher inputs on one path: `auto` (default), `transformers`, `generate` or `completions`."""

    def __init__(
        self,
        client: VLLMCompletionsClient,
        k: int = 50,
        concurrency: int = 32,
        timeout_s: float = 120.0,
        *,
        max_positions_in_flight: int = 65536,
        path: str = "auto",
        local_model_dir: str | None = None,
        local_device: str = "cpu",
        local_threads: int | None = None,
    ):
        if k < 1:
            raise ValueError(f"distill top-k must be >= 1, got {k}")
        self.client = client
        self.k = k
        self.timeout_s = timeout_s
        self.semaphore = asyncio.Semaphore(concurrency)
        self.positions = PositionBudget(max_positions_in_flight)
        self.configured_path = path
        self.local_model_dir = local_model_dir
        choose_path(path, local_model_dir, None)  # a bad path or a missing directory fails here, not per turn
        self.local: TransformersTeacher | None = None
        if local_model_dir and path in ("auto", "transformers"):
            self.local = TransformersTeacher(
                local_model_dir, k, device=local_device, max_batch=concurrency, threads=local_threads
            )
        self.choice: PathChoice | None = None
        self._choosing = asyncio.Lock()

    async def choose_path(self, probe_ids: list[int] | None = None) -> PathChoice:
        """Settle the path once (probing the server for `auto`) and log it in one line."""
        if self.choice is not None:
            return self.choice
        async with self._choosing:
            if self.choice is None:
                probe = None
                if self.configured_path == "auto" and not self.local_model_dir:
                    probe = await probe_generate(self.client, probe_ids or [1, 2, 3, 4])
                choice = choose_path(self.configured_path, self.local_model_dir, probe)
                if choice.path == "transformers" and self.local is not None:
                    await asyncio.to_thread(self.local.load)
                self.choice = choice
                # A fallback of `auto` to the slow path is worth a warning: it names the flag that fixes it.
                fell_back = self.configured_path == "auto" and choice.path == "completions"
                logger.log(
                    logging.WARNING if fell_back else logging.INFO,
                    choice.log_line(f"model {self.client.model!r} at {self.client.base_url}"),
                )
        return self.choice

    async def score_turn(
        self,
        ids: list[int],
        prompt_len: int,
        student_ids: list[int],
        student_topk_ids: list[list[int]] | None = None,
    ) -> TurnScore:
        """The contract rows of the turn `ids[prompt_len:]`, which must be `student_ids`; with
        `student_topk_ids` (one list per turn position), the teacher's logprob of each of those ids too."""
        if student_topk_ids is not None and len(student_topk_ids) != len(student_ids):
            raise AlignmentError(
                f"{len(student_topk_ids)} student top-K rows for {len(student_ids)} turn ids"
            )
        if list(ids[prompt_len:]) != list(student_ids):
            raise AlignmentError(
                f"teacher input ends in {len(ids) - prompt_len} ids that are not the student's {len(student_ids)}"
            )
        choice = await self.choose_path(list(ids[: min(len(ids), 8)]))
        started = time.perf_counter()
        if choice.path == "transformers":
            assert self.local is not None
            async with asyncio.timeout(self.timeout_s):
                (ids_rows, lp_rows), exact = await self.local.score_turn_on(ids, prompt_len, student_topk_ids)
            stats = TeacherCallStats(time.perf_counter() - started, len(ids), choice.path)
            return TurnScore(ids_rows, lp_rows, stats, exact)
        request = generate_prompt_topk if choice.path == "generate" else completions_prompt_topk
        async with self.semaphore, self.positions.hold(len(ids)):
            started = time.perf_counter()
            async with asyncio.timeout(self.timeout_s):
                raw = await request(self.client, ids, self.k, from_pos=prompt_len)
            latency = time.perf_counter() - started
        rows: Rows = turn_rows(raw.topk, prompt_len, list(student_ids), self.k)
        looked_up = None
        if student_topk_ids is not None:
            looked_up, _ = teacher_logprobs_on(student_topk_ids, rows[0], rows[1])
        stats = TeacherCallStats(latency, len(ids), choice.path, raw.body_bytes)
        return TurnScore(rows[0], rows[1], stats, looked_up)

    async def score_candidates(
        self,
        inputs: list[tuple[list[int], int]],
        student_ids: list[int],
        student_topk_ids: list[list[int]] | None = None,
    ) -> tuple[list[TurnScore], float]:
        """The rows of one turn under each candidate teacher input `(ids, prompt_len)`, and the wall time.

        In-process: one pass over the candidates' shared prefix, reused (KV cache) for each
        candidate's own hint and turn (`TransformersTeacher.score_shared_prefix`). On vLLM: the
        candidates' requests go out together; prompt-logprob requests never read vLLM's prefix cache
        (reading it returns garbage rows for the cached positions; docs/notes/benchmarks-lab.md, section 6), so each
        one costs a full request."""
        for ids, prompt_len in inputs:
            if list(ids[prompt_len:]) != list(student_ids):
                raise AlignmentError("a candidate's teacher input does not end in the student's turn")
        choice = await self.choose_path(list(inputs[0][0][: min(len(inputs[0][0]), 8)]))
        started = time.perf_counter()
        if choice.path == "transformers" and len(inputs) > 1:
            assert self.local is not None
            async with asyncio.timeout(self.timeout_s):
                extra = None if student_topk_ids is None else [student_topk_ids] * len(inputs)
                rows, exact = await asyncio.to_thread(self.local.score_shared_prefix_on, inputs, extra)
            latency = time.perf_counter() - started
            return [
                TurnScore(
                    r[0],
                    r[1],
                    TeacherCallStats(latency, len(ids), choice.path),
                    None if exact is None else exact[b],
                )
                for b, (r, (ids, _)) in enumerate(zip(rows, inputs, strict=True))
            ], latency
        scores = await asyncio.gather(
            *(self.score_turn(ids, p, student_ids, student_topk_ids) for ids, p in inputs)
        )
        return list(scores), time.perf_counter() - started

    async def aclose(self) -> None:
        await self.client.close()
        if self.local is not None:
            await self.local.close()

    async def check_tokenizer(self, tokenizer: Any) -> None:
        """Refuse a teacher whose tokenizer differs from the policy's: the in-process teacher's own
        tokenizer files when it scores (`local_model_dir`), else the endpoint's (vLLM `/tokenize`,
        `/detokenize`).

        Raises TeacherTokenizerMismatchError on a mismatch; logs a warning when the endpoint has no
        tokenize route (not vLLM), since then the check cannot be made."""
        if self.local is not None:
            await asyncio.to_thread(self._check_local_tokenizer, tokenizer)
            return
        base = root_url(self.client.base_url)
        local, sample = _policy_probe(tokenizer)
        key = self.client.api_key
        try:
            answer = await http.request(
                "POST",
                f"{base}/tokenize",
                api_key=key,
                payload={"model": self.client.model, "prompt": TOKENIZER_PROBE, "add_special_tokens": False},
            )
            if answer.status == 404:
                logger.warning("teacher at %s has no /tokenize route; tokenizer not verified", base)
                return
            remote = answer.json().get("tokens")
            answer = await http.request(
                "POST",
                f"{base}/detokenize",
                api_key=key,
                payload={"model": self.client.model, "tokens": sample},
            )
            detok = answer.json().get("prompt")
        except (ServerUnreachableError, TransientServerError, ValueError, AttributeError) as exc:
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

    def _check_local_tokenizer(self, tokenizer: Any) -> None:
        from transformers import AutoTokenizer

        where = f"the in-process teacher's directory {self.local_model_dir!r}"
        try:
            local = AutoTokenizer.from_pretrained(self.local_model_dir)
        except (OSError, ValueError) as exc:
            raise TeacherTokenizerMismatchError(
                f"cannot load a tokenizer from {where} to check it against the policy's ({exc}); put the "
                "teacher's tokenizer files there, or set check_teacher_tokenizer: false"
            ) from exc
        policy_ids, sample = _policy_probe(tokenizer)
        teacher_ids = local.encode(TOKENIZER_PROBE, add_special_tokens=False)
        if teacher_ids != policy_ids or len(local) != len(tokenizer):
            raise TeacherTokenizerMismatchError(
                f"{where} tokenizes a probe string into {len(teacher_ids)} ids over a vocabulary of "
                f"{len(local)}, the policy tokenizer into {len(policy_ids)} over {len(tokenizer)}; OPD needs "
                "the same tokenizer"
            )
        decode = {"skip_special_tokens": False, "clean_up_tokenization_spaces": False}
        if local.decode(sample, **decode) != tokenizer.decode(sample, **decode):
            raise TeacherTokenizerMismatchError(
                f"{where} decodes ids {sample[:6]}... differently from the policy tokenizer; OPD needs the "
                "same vocabulary"
            )
