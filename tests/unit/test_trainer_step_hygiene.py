"""The torch trainer's step: no optimizer step on an all-zero gradient, and no dropout in the
policy forward (LoRA's included). Tiny random Qwen2 models, real AdamW, real peft."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from hermes_opd.contract.errors import ConfigError
from tests.support.torch_trainer import VOCAB, make_config, make_group
from trainer_adapters.dropout import active_dropout, disable_dropout
from trainer_adapters.torch_trainer import TorchTrainer


def _weights(trainer: TorchTrainer) -> list[torch.Tensor]:
    return [p.detach().clone() for p in trainer.model.parameters() if p.requires_grad]


def _equal_scores(group: dict) -> dict:
    return group | {"scores": [1.0] * len(group["scores"])}


# --- 6. zero gradients ------------------------------------------------------------------------


def test_all_zero_gradient_takes_no_optimizer_step(tiny_model_dir, tmp_path):  # noqa: F811
    trainer = TorchTrainer(
        make_config(tiny_model_dir, tmp_path, loss__w_opd=0.0, optim__weight_decay=0.1, optim__warmup_steps=4)
    )
    rng = np.random.default_rng(0)
    first = trainer.train_step([make_group(rng), make_group(rng)])  # a real step: Adam has momentum now
    assert first.get("optim/step_skipped", 0.0) == 0.0 and first["grad_norm"] > 0
    before = _weights(trainer)
    lr_before = trainer.scheduler.get_last_lr()[0]

    # w_opd = 0 and every score equal: the gradient is exactly zero. AdamW would still move the
    # weights (momentum, weight decay); the trainer must not step.
    metrics = trainer.train_step([_equal_scores(make_group(rng)), _equal_scores(make_group(rng))])
    after = _weights(trainer)
    moved = max((a - b).abs().max().item() for a, b in zip(before, after, strict=True))
    assert moved == 0.0, f"the weights moved by up to {moved:.3g} on an all-zero gradient"
    assert metrics["optim/step_skipped"] == 1.0 and metrics["optim/skipped_steps"] == 1.0
    assert metrics["grad_norm"] == 0.0 and metrics["loss/grpo"] == 0.0
    assert metrics["loss/opd"] > 0  # still measured and logged at weight 0
    assert trainer.step == 2 and trainer.scheduler.get_last_lr()[0] == lr_before

    again = trainer.train_step([make_group(rng), make_group(rng)])
    assert again["optim/step_skipped"] == 0.0 and again["optim/skipped_steps"] == 1.0
    assert not all(torch.equal(a, b) for a, b in zip(after, _weights(trainer), strict=True))


# --- 7. dropout -------------------------------------------------------------------------------


@pytest.fixture
def dropout_model_dir(tmp_path):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        attention_dropout=0.3,
    )
    path = tmp_path / "dropout-qwen2"
    Qwen2ForCausalLM(config).save_pretrained(path)
    return path


def test_policy_forward_has_no_dropout_so_on_policy_log_ratio_is_zero(dropout_model_dir, tmp_path):
    trainer = TorchTrainer(make_config(dropout_model_dir, tmp_path))
    batch = trainer.collate([make_group(np.random.default_rng(3))])
    mask = batch.loss_mask_BT
    with torch.no_grad():
        trainer.model.eval()
        sampler = trainer.student_logprobs(batch).token_logprobs_BT  # deterministic, like vLLM's
        trainer.model.train()
        train_a = trainer.student_logprobs(batch).token_logprobs_BT
        train_b = trainer.student_logprobs(batch).token_logprobs_BT
    log_ratio = (train_a - sampler)[mask].abs().max().item()
    assert log_ratio < 1e-5, f"on-policy |log ratio| {log_ratio}"
    assert torch.equal(train_a, train_b)
    assert active_dropout(trainer.model) == []
    assert trainer.model.training  # dropout is off, train mode stays on


def test_disable_dropout_covers_lora_dropout_and_attention_dropout(dropout_model_dir):
    import peft
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(dropout_model_dir, attn_implementation="eager")
    model = peft.get_peft_model(
        model,
        peft.LoraConfig(
            r=4, lora_alpha=8, lora_dropout=0.2, target_modules="all-linear", init_lora_weights=False
        ),
    )
    found = active_dropout(model)
    assert any("lora_dropout" in name for name in found) and any(
        "attention_dropout" in name for name in found
    )
    model.train()
    ids = torch.randint(0, VOCAB, (2, 12), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        noisy = [model(input_ids=ids).logits for _ in range(2)]
    assert not torch.equal(noisy[0], noisy[1])  # dropout really is on before
    assert disable_dropout(model) >= 2
    assert active_dropout(model) == []
    with torch.no_grad():
        clean = [model(input_ids=ids).logits for _ in range(2)]
        model.eval()
        reference = model(input_ids=ids).logits
    assert torch.equal(clean[0], clean[1]) and torch.equal(clean[0], reference)


def test_lora_dropout_config_is_refused_with_the_reason(tiny_model_dir, tmp_path):  # noqa: F811
    with pytest.raises(ConfigError, match="LoRA dropout 0.1 is not supported.*set model.lora.dropout: 0"):
        make_config(tiny_model_dir, tmp_path, model__lora={"enabled": True, "dropout": 0.1})
