"""Student logprobs for the losses: one log_softmax over the vocabulary, then one gather.

The target token and the teacher's top-K ids of a position are gathered together from the same
log_softmax, so the student's top-K mass (and with it the tail bin) is consistent with its
token logprob, and no [B, T, K, V] tensor (K copies of the logits) ever exists.

Memory: the [B, T, V] float32 log-softmax is the largest activation of a training step. With
`chunk_size` set, the head runs on T-chunks of the final hidden states under activation
checkpointing, so only one [B, chunk, V] block is alive at a time, in the forward and the backward.
This path assumes `logits = output_embeddings(last_hidden_state)`, true for Llama/Qwen/Mistral-style
models; `check_chunked_matches_full` verifies it once for the model at hand.

Temperature: logprobs are log_softmax(logits / temperature). The default 1.0 matches what the
sampler's `inference_logprobs` and the teacher rows are (raw logprobs, see docs/trainers.md);
keep it: the teacher's prompt logprobs are raw whatever the sampler reports, and rollouts sampled at
another temperature bias the estimators anyway (docs/trainers.md, "Temperature").
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint


@dataclass
class StudentLogprobs:
    """Student logprobs aligned with a CollatedBatch (target position j)."""

    token_logprobs_BT: torch.Tensor
    """float32: log p_student(target_ids[j])."""
    topk_logprobs_BTK: torch.Tensor | None
    """float32: log p_student(teacher_topk_ids[j, k]); None when not requested."""


def gather_logprobs(
    logits_BTV: torch.Tensor, index_BTK: torch.Tensor, temperature: float = 1.0
) -> torch.Tensor:
    """log_softmax(logits / temperature) gathered at `index_BTK`, in float32."""
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    logits = logits_BTV.float()
    if temperature != 1.0:
        logits = logits / temperature
    return torch.log_softmax(logits, dim=-1).gather(-1, index_BTK)


def chunked_gather_logprobs(
    hidden_BTH: torch.Tensor,
    head: nn.Module,
    index_BTK: torch.Tensor,
    *,
    temperature: float = 1.0,
    chunk_size: int = 512,
) -> torch.Tensor:
    """`gather_logprobs(head(hidden), index)` computed over T-chunks with activation checkpointing."""
    if chunk_size <= 0:
        raise ValueError(f"chunk_size must be positive, got {chunk_size}")

    def one_chunk(hidden: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        return gather_logprobs(head(hidden), index, temperature)

    pieces = []
    for start in range(0, hidden_BTH.shape[1], chunk_size):
        end = start + chunk_size
        hidden, index = hidden_BTH[:, start:end], index_BTK[:, start:end]
        if torch.is_grad_enabled() and hidden.requires_grad:
            pieces.append(checkpoint(one_chunk, hidden, index, use_reentrant=False))
        else:
            pieces.append(one_chunk(hidden, index))
    return torch.cat(pieces, dim=1)


def _decoder_and_head(model: nn.Module) -> tuple[nn.Module, nn.Module]:
    decoder = model.get_decoder() if hasattr(model, "get_decoder") else None
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if decoder is None or head is None:
        raise ValueError(
            f"{type(model).__name__} exposes no get_decoder()/get_output_embeddings(); "
            "set logprob_chunk_size to null to use the model's own logits"
        )
    return decoder, head


def compute_student_logprobs(
    model: nn.Module,
    input_ids_BT: torch.Tensor,
    attention_mask_BT: torch.Tensor,
    target_ids_BT: torch.Tensor,
    topk_ids_BTK: torch.Tensor | None = None,
    *,
    temperature: float = 1.0,
    chunk_size: int | None = None,
) -> StudentLogprobs:
    """Run `model` (a transformers causal LM, plain or PEFT-wrapped) and gather the student's
    logprobs of the targets and, when given, of the teacher's top-K ids."""
    index = target_ids_BT.unsqueeze(-1)
    if topk_ids_BTK is not None:
        index = torch.cat([index, topk_ids_BTK], dim=-1)
    attention_mask = attention_mask_BT.long()
    if chunk_size is None:
        logits = model(input_ids=input_ids_BT, attention_mask=attention_mask, use_cache=False).logits
        gathered = gather_logprobs(logits, index, temperature)
    else:
        decoder, head = _decoder_and_head(model)
        hidden = decoder(
            input_ids=input_ids_BT, attention_mask=attention_mask, use_cache=False
        ).last_hidden_state
        gathered = chunked_gather_logprobs(
            hidden, head, index, temperature=temperature, chunk_size=chunk_size
        )
    return StudentLogprobs(
        token_logprobs_BT=gathered[..., 0],
        topk_logprobs_BTK=gathered[..., 1:] if topk_ids_BTK is not None else None,
    )


@torch.no_grad()
def check_chunked_matches_full(
    model: nn.Module, vocab_size: int, device: torch.device, atol: float = 1e-4
) -> None:
    """Raise if the chunked path (decoder + output embeddings) disagrees with model(...).logits,
    e.g. for a model that scales or soft-caps its logits after the head."""
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(0, vocab_size, (1, 8), generator=generator).to(device)
    mask = torch.ones_like(ids, dtype=torch.bool)
    full = compute_student_logprobs(model, ids, mask, ids, temperature=1.0).token_logprobs_BT
    chunked = compute_student_logprobs(model, ids, mask, ids, temperature=1.0, chunk_size=3).token_logprobs_BT
    if not torch.allclose(full.float(), chunked.float(), atol=atol, rtol=1e-3):
        diff = (full.float() - chunked.float()).abs().max().item()
        raise ValueError(
            f"chunked logprobs differ from the model's own logits by {diff:.3g}: this model does more "
            "than output_embeddings(hidden); set logprob_chunk_size to null"
        )
