"""Load the policy: a transformers causal LM, full or LoRA (peft), on the right device and dtype.

Precision. On CUDA the forward and backward run under bf16 autocast while the trainable weights
stay float32: AdamW on bf16 weights silently drops every update smaller than about 2^-8 of the
weight (at lr 1e-6 that is nearly all of them). For LoRA the frozen base is loaded in bf16 (half the
memory) and peft keeps the adapter in float32. On CPU everything is float32.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from trainer_adapters.dropout import disable_dropout
from trainer_adapters.trainer_config import ModelConfig


@dataclass(frozen=True)
class Precision:
    device: torch.device
    load_dtype: torch.dtype
    """dtype the pretrained weights are loaded in."""
    autocast_dtype: torch.dtype | None
    """dtype of the autocast region around forward/backward; None: no autocast."""

    def autocast(self) -> contextlib.AbstractContextManager:
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=self.autocast_dtype)


def resolve_precision(config: ModelConfig) -> Precision:
    """auto: CUDA when available; bf16 compute on CUDA, float32 on CPU (see module docstring)."""
    if config.device == "auto":
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    else:
        device = torch.device(config.device)
        if device.type == "cuda" and not torch.cuda.is_available():
            raise RuntimeError("model.device is 'cuda' but CUDA is not available")
    bf16 = config.dtype == "bfloat16" or (config.dtype == "auto" and device.type == "cuda")
    if not bf16:
        return Precision(device, torch.float32, None)
    load = torch.bfloat16 if config.lora.enabled else torch.float32
    return Precision(device, load, torch.bfloat16)


def load_policy(
    config: ModelConfig, precision: Precision, checkpoint_model_dir: Path | None = None
) -> nn.Module:
    """The trainable model, from `config.path` or from a checkpoint's `model/` directory, with
    every dropout off (LoRA's included) and in train mode.

    A full fine-tune checkpoint holds the whole model; a LoRA checkpoint holds only the adapter,
    which is put back onto the base model from `config.path`.
    """
    from transformers import AutoModelForCausalLM

    lora = config.lora
    base_path = config.path
    if checkpoint_model_dir is not None and not lora.enabled:
        base_path = str(checkpoint_model_dir)
    model = AutoModelForCausalLM.from_pretrained(
        base_path, dtype=precision.load_dtype, trust_remote_code=config.trust_remote_code
    )
    if lora.enabled:
        import peft

        if checkpoint_model_dir is not None:
            model = peft.PeftModel.from_pretrained(model, str(checkpoint_model_dir), is_trainable=True)
        else:
            peft_config = peft.LoraConfig(
                r=lora.r,
                lora_alpha=lora.alpha,
                lora_dropout=lora.dropout,
                target_modules=lora.target_modules,
                task_type=peft.TaskType.CAUSAL_LM,
            )
            model = peft.get_peft_model(model, peft_config)
    if config.gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        if lora.enabled:
            model.enable_input_require_grads()
    disable_dropout(model)  # the policy forward must be deterministic (dropout.py)
    model.to(precision.device)
    model.train()
    return model


def vocab_rows(model: nn.Module) -> int:
    """Rows of the input embedding: every token and teacher id must be below this."""
    return int(model.get_input_embeddings().num_embeddings)


def default_pad_token_id(model: nn.Module) -> int:
    pad = getattr(model.config, "pad_token_id", None)
    return int(pad) if pad is not None else 0
