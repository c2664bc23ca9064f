"""The in-process teacher path (`transformers`): top-K rows for a turn at the cost of one prefill.

For a teacher whose weights are on the same machine (the same model the policy/teacher server
serves, or a copy of it). Per batch of teacher inputs: ONE forward pass of the base model, then the
LM head, `log_softmax` and `top-k` on the turn's positions only (the rows before the turn are never
computed, let alone serialized), plus the logprob of each student token. Its cost per turn is the
prefill and nothing that grows with the context's length beyond it.

The `*_on` variants also read, from the same full distribution, the exact logprob of any further ids
at each turn position (the student's own sampling-time top-K: docs/distill-format.md, "Student top-K").

Requests are batched: while a forward pass runs, new ones queue; the next pass takes all of them
(up to `max_batch` inputs and `max_batch_tokens` padded tokens). The forward runs in a worker
thread, so the event loop (rollouts, judge votes) keeps going. In float32 the rows equal vLLM's
float32 prompt logprobs within 1.4e-5 on the dev model (`tests/integration/test_teacher_paths.py`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field
from typing import Any

from hermes_opd.contract.rows import Rows
from scoring.teacher_rows import rows_from_topk_arrays

ExtraIds = list[list[int]]
"""Further ids to read at each turn position of one input (one list per position, possibly empty)."""
ExtraLogprobs = list[list[float]]
"""The teacher's exact logprob of each of those ids, parallel to them."""

logger = logging.getLogger(__name__)


@dataclass
class _Pending:
    ids: list[int]
    prompt_len: int
    future: asyncio.Future = field(repr=False)
    extra_ids: ExtraIds | None = None


def shared_prefix_len(sequences: list[list[int]]) -> int:
    """Length of the longest prefix common to every id list."""
    if not sequences:
        return 0
    n = min(len(s) for s in sequences)
    first = sequences[0]
    for i in range(n):
        if any(s[i] != first[i] for s in sequences[1:]):
            return i
    return n


class TransformersTeacher:
    """Scores teacher inputs in-process with a transformers causal LM (float32 by default)."""

    def __init__(
        self,
        model_dir: str,
        k: int,
        *,
        device: str = "cpu",
        dtype: str = "float32",
        max_batch: int = 8,
        max_batch_tokens: int = 32768,
        threads: int | None = None,
    ) -> None:
        if k < 1:
            raise ValueError(f"distill top-k must be >= 1, got {k}")
        self.model_dir = str(model_dir)
        self.k = k
        self.device = device
        self.dtype = dtype
        self.max_batch = max_batch
        self.max_batch_tokens = max_batch_tokens
        self.threads = threads
        """torch intra-op threads for the forward (None: torch's default). On a CPU shared with other
        busy processes, 1 avoids waiting on a descheduled worker thread (docs/scaling.md)."""
        self._model: Any = None
        self._queue: list[_Pending] = []
        self._wake: asyncio.Event | None = None
        self._worker: asyncio.Task | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.batches = 0
        """Forward passes run so far (tests check that concurrent turns share one)."""

    # -- model ----------------------------------------------------------------------------------
    def load(self) -> None:
        """Load the weights (once). Raises a ValueError that names the directory when that fails."""
        if self._model is not None:
            return
        import torch
        from transformers import AutoModelForCausalLM

        try:
            model = AutoModelForCausalLM.from_pretrained(self.model_dir, dtype=getattr(torch, self.dtype))
        except (OSError, ValueError) as exc:
            raise ValueError(f"cannot load the in-process teacher from {self.model_dir!r}: {exc}") from exc
        model.to(self.device)
        model.eval()
        self._model = model

    def vocab_size(self) -> int:
        self.load()
        return int(self._model.get_output_embeddings().weight.shape[0])

    def score_batch(self, items: list[tuple[list[int], int]]) -> list[Rows]:
        """Rows for each `(ids, prompt_len)`: positions `[prompt_len, len(ids))`, the turn's (sync)."""
        return self.score_batch_on(items, None)[0]

    def score_batch_on(
        self, items: list[tuple[list[int], int]], extra_ids: list[ExtraIds] | None
    ) -> tuple[list[Rows], list[ExtraLogprobs] | None]:
        """`score_batch`, plus the exact logprob of `extra_ids[b][j]` at turn position j of input b."""
        import torch

        self.load()
        if self.threads is not None and torch.get_num_threads() != self.threads:
            torch.set_num_threads(self.threads)
        model = self._model
        for ids, prompt_len in items:
            if not 1 <= prompt_len < len(ids):
                raise ValueError(f"prompt_len {prompt_len} leaves no turn in {len(ids)} ids")
        longest = max(len(ids) for ids, _ in items)
        input_ids = torch.zeros((len(items), longest), dtype=torch.long)
        mask = torch.zeros((len(items), longest), dtype=torch.long)
        for b, (ids, _) in enumerate(items):
            input_ids[b, : len(ids)] = torch.tensor(ids, dtype=torch.long)
            mask[b, : len(ids)] = 1
        base = getattr(model, model.base_model_prefix)
        # Inputs of one length need no padding mask: the plain causal path is ~25% faster on CPU.
        kwargs = (
            {} if all(len(ids) == longest for ids, _ in items) else {"attention_mask": mask.to(self.device)}
        )
        with torch.inference_mode():
            hidden = base(input_ids=input_ids.to(self.device), **kwargs).last_hidden_state
            # Row `pos` (the distribution over ids[pos]) comes from the hidden state at pos - 1.
            picks = [hidden[b, prompt_len - 1 : len(ids) - 1] for b, (ids, prompt_len) in enumerate(items)]
        out = self._rows_from_hidden(items, picks, extra_ids)
        self.batches += 1
        return out

    def score_shared_prefix(self, items: list[tuple[list[int], int]]) -> list[Rows]:
        """Rows for candidate inputs that share a prefix (the context before a hint), at about the cost
        of one: the longest common prefix is run ONCE and its KV cache is repeated for each candidate,
        then only the candidates' own suffixes (hint + turn) run, batched, on top of it. The rows equal
        `score_batch`'s (tests/unit/test_hint_candidates.py)."""
        return self.score_shared_prefix_on(items, None)[0]

    def score_shared_prefix_on(
        self, items: list[tuple[list[int], int]], extra_ids: list[ExtraIds] | None
    ) -> tuple[list[Rows], list[ExtraLogprobs] | None]:
        """`score_shared_prefix`, plus the exact logprob of `extra_ids[b][j]` at turn position j of input b."""
        import torch

        self.load()
        if self.threads is not None and torch.get_num_threads() != self.threads:
            torch.set_num_threads(self.threads)
        for ids, prompt_len in items:
            if not 1 <= prompt_len < len(ids):
                raise ValueError(f"prompt_len {prompt_len} leaves no turn in {len(ids)} ids")
        shared = shared_prefix_len([ids for ids, _ in items])
        # Every row the turn needs comes from a position at or after prompt_len - 1: keep those out
        # of the prefix, so each is computed with its own candidate's suffix.
        shared = min(shared, min(p for _, p in items) - 1)
        if len(items) == 1 or shared < 1:
            return self.score_batch_on(items, extra_ids)
        model = self._model
        base = getattr(model, model.base_model_prefix)
        longest = max(len(ids) for ids, _ in items) - shared
        suffix = torch.zeros((len(items), longest), dtype=torch.long)
        for b, (ids, _) in enumerate(items):
            suffix[b, : len(ids) - shared] = torch.tensor(ids[shared:], dtype=torch.long)
        with torch.inference_mode():
            prefix = torch.tensor([items[0][0][:shared]], dtype=torch.long, device=self.device)
            cache = base(input_ids=prefix, use_cache=True).past_key_values
            cache.batch_repeat_interleave(len(items))
            # Right padding needs no mask: causal attention never lets a real position see a later pad.
            hidden = base(
                input_ids=suffix.to(self.device), past_key_values=cache, use_cache=True
            ).last_hidden_state
            picks = [
                hidden[b, prompt_len - 1 - shared : len(ids) - 1 - shared]
                for b, (ids, prompt_len) in enumerate(items)
            ]
        out = self._rows_from_hidden(items, picks, extra_ids)
        self.batches += 1
        return out

    def _rows_from_hidden(
        self, items: list[tuple[list[int], int]], picks: list[Any], extra_ids: list[ExtraIds] | None = None
    ) -> tuple[list[Rows], list[ExtraLogprobs] | None]:
        """LM head, log_softmax, top-k and the student tokens' logprobs on the turn positions' hidden
        states; with `extra_ids`, the logprob of those ids too, read from the same distribution."""
        import torch

        extra_rows: list[list[int]] | None = None
        if extra_ids is not None:
            if len(extra_ids) != len(items):
                raise ValueError(f"{len(extra_ids)} extra-id lists for {len(items)} inputs")
            for (ids, prompt_len), rows in zip(items, extra_ids, strict=True):
                if len(rows) != len(ids) - prompt_len:
                    raise ValueError(
                        f"{len(rows)} extra-id rows for a turn of {len(ids) - prompt_len} positions"
                    )
            extra_rows = [list(row) for rows in extra_ids for row in rows]

        model = self._model
        with torch.inference_mode():
            logits = model.get_output_embeddings()(torch.cat(picks)).float()
            logprobs = torch.log_softmax(logits, dim=-1)
            k = min(self.k, logprobs.shape[-1])
            top_lps, top_ids = torch.topk(logprobs, k, dim=-1)
            students = torch.tensor(
                [t for ids, p in items for t in ids[p:]], dtype=torch.long, device=self.device
            )
            student_lps = logprobs.gather(1, students[:, None])[:, 0]
            extra_np = None
            if extra_rows is not None:
                width = max((len(row) for row in extra_rows), default=0)
                index = torch.tensor([row + [0] * (width - len(row)) for row in extra_rows], dtype=torch.long)
                extra_np = logprobs.gather(1, index.reshape(len(extra_rows), width).to(self.device))
                extra_np = extra_np.cpu().double().numpy()
        top_ids_np, top_lps_np = top_ids.cpu().numpy(), top_lps.cpu().double().numpy()
        students_np, student_lps_np = students.cpu().numpy(), student_lps.cpu().double().numpy()
        out: list[Rows] = []
        extras: list[ExtraLogprobs] | None = None if extra_rows is None else []
        at = 0
        for ids, prompt_len in items:
            n = len(ids) - prompt_len
            sl = slice(at, at + n)
            out.append(
                rows_from_topk_arrays(
                    top_ids_np[sl], top_lps_np[sl], students_np[sl], student_lps_np[sl], self.k
                )
            )
            if extras is not None and extra_rows is not None and extra_np is not None:
                extras.append(
                    [[float(v) for v in extra_np[at + j, : len(extra_rows[at + j])]] for j in range(n)]
                )
            at += n
        return out, extras

    # -- batching -------------------------------------------------------------------------------
    async def score_turn(self, ids: list[int], prompt_len: int) -> Rows:
        """The turn's rows (`ids[prompt_len:]` are the student's tokens), batched with other calls."""
        return (await self.score_turn_on(ids, prompt_len, None))[0]

    async def score_turn_on(
        self, ids: list[int], prompt_len: int, extra_ids: ExtraIds | None
    ) -> tuple[Rows, ExtraLogprobs | None]:
        """`score_turn`, plus the exact logprob of `extra_ids[j]` at turn position j."""
        if not 1 <= prompt_len < len(ids):
            raise ValueError(f"prompt_len {prompt_len} leaves no turn in {len(ids)} ids")
        loop = asyncio.get_running_loop()
        if self._worker is None or self._worker.done() or self._loop is not loop:
            self._wake = asyncio.Event()
            self._queue = []
            self._loop = loop
            self._worker = loop.create_task(self._run())
        if extra_ids is not None and len(extra_ids) != len(ids) - prompt_len:
            raise ValueError(
                f"{len(extra_ids)} extra-id rows for a turn of {len(ids) - prompt_len} positions"
            )
        pending = _Pending(list(ids), prompt_len, loop.create_future(), extra_ids)
        self._queue.append(pending)
        self._wake.set()
        return await pending.future

    def _take_batch(self) -> list[_Pending]:
        batch: list[_Pending] = []
        longest = 0
        while self._queue and len(batch) < self.max_batch:
            candidate = self._queue[0]
            longest_next = max(longest, len(candidate.ids))
            if batch and longest_next * (len(batch) + 1) > self.max_batch_tokens:
                break
            batch.append(self._queue.pop(0))
            longest = longest_next
        return batch

    async def _run(self) -> None:
        assert self._wake is not None
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._queue:
                batch = [p for p in self._take_batch() if not p.future.cancelled()]
                if not batch:
                    continue
                extra = None
                if any(p.extra_ids is not None for p in batch):
                    extra = [
                        p.extra_ids if p.extra_ids is not None else [[]] * (len(p.ids) - p.prompt_len)
                        for p in batch
                    ]
                try:
                    rows, extras = await asyncio.to_thread(
                        self.score_batch_on, [(p.ids, p.prompt_len) for p in batch], extra
                    )
                except Exception as exc:  # noqa: BLE001 - each waiting turn gets the error
                    for p in batch:
                        if not p.future.done():
                            p.future.set_exception(exc)
                    continue
                for b, p in enumerate(batch):
                    if not p.future.done():
                        p.future.set_result(
                            (rows[b], extras[b] if extras is not None and p.extra_ids is not None else None)
                        )

    async def close(self) -> None:
        if self._worker is not None:
            self._worker.cancel()
            with contextlib.suppress(asyncio.CancelledError, RuntimeError):
                await self._worker
        self._worker = None
        for p in self._queue:
            if not p.future.done():
                p.future.cancel()
        self._queue.clear()
