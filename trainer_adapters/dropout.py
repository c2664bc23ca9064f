"""Dropout off in the policy forward (pure model surgery, no I/O).

The GRPO ratio and the OPD terms compare the trainer's logprobs with the sampler's and the
teacher's, which come from a deterministic forward pass. With dropout on, even on-policy data has
a ratio != 1 (with dropout 0.1, |log ratio| reaches about 0.1 per token), so the clip fires on
noise and the OPD gap mixes in dropout noise. The model stays in train mode (gradient
checkpointing and similar code paths key on `module.training`); only the dropout goes.

Two kinds of dropout are switched off:
- every `torch.nn.Dropout*` module, LoRA's `lora_dropout` modules included (p = 0);
- float attributes named like dropout on modules and on the model config (`attention_dropout`,
  `hidden_dropout`, ...), which attention implementations pass as the dropout probability of
  their fused kernels while `module.training` is set.
"""

from __future__ import annotations

from torch import nn

_DROPOUT_MODULES = (
    nn.Dropout,
    nn.Dropout1d,
    nn.Dropout2d,
    nn.Dropout3d,
    nn.AlphaDropout,
    nn.FeatureAlphaDropout,
)


def _zero_dropout_attributes(obj: object) -> int:
    changed = 0
    for name, value in list(vars(obj).items()):
        if "dropout" in name.lower() and isinstance(value, float) and not isinstance(value, bool) and value:
            setattr(obj, name, 0.0)
            changed += 1
    return changed


def disable_dropout(model: nn.Module) -> int:
    """Set every dropout probability in `model` to 0; returns how many were non-zero."""
    changed = 0
    for module in model.modules():
        if isinstance(module, _DROPOUT_MODULES) and module.p:
            module.p = 0.0
            changed += 1
        changed += _zero_dropout_attributes(module)
    seen: set[int] = set()
    for module in model.modules():
        config = getattr(module, "config", None)
        if config is not None and id(config) not in seen and hasattr(config, "__dict__"):
            seen.add(id(config))
            changed += _zero_dropout_attributes(config)
    return changed


def active_dropout(model: nn.Module) -> list[str]:
    """Names of modules (and `config.<attr>`s) whose dropout is still non-zero: [] once disabled."""
    found = [
        f"{name or '<root>'} (p={module.p})"
        for name, module in model.named_modules()
        if isinstance(module, _DROPOUT_MODULES) and module.p
    ]
    for name, module in model.named_modules():
        for attr, value in vars(module).items():
            if "dropout" in attr.lower() and isinstance(value, float) and value:
                found.append(f"{name or '<root>'}.{attr}={value}")
    return found
