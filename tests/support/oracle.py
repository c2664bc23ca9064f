"""Independent transformers re-scoring: the oracle for every logprob the system emits."""

from __future__ import annotations

import torch


@torch.no_grad()
def full_logprobs(model, ids: list[int]) -> torch.Tensor:
    """[T, V] float32 log-softmax; row t is the distribution over the token AT t+1 ... shifted so that
    row `pos` (pos >= 1) is the distribution over ids[pos] given ids[:pos]. Row 0 is NaN."""
    logits = model(input_ids=torch.tensor([ids])).logits[0].float()
    logprobs = torch.log_softmax(logits, dim=-1)
    out = torch.full_like(logprobs, float("nan"))
    out[1:] = logprobs[:-1]
    return out


def token_logprobs(model, ids: list[int]) -> list[float]:
    """logprob of ids[pos] given ids[:pos] for every pos (NaN at 0)."""
    lp = full_logprobs(model, ids)
    values = [float("nan")] + [float(lp[pos, ids[pos]]) for pos in range(1, len(ids))]
    return values
