"""scripts/student_copy_experiments.py: the parts of its own (its corpus and training are the copy
recipe's, tests/unit/test_student_recipe.py)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "student_copy_experiments.py"


@pytest.fixture(scope="module")
def experiments():
    spec = importlib.util.spec_from_file_location("student_copy_experiments", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_previous_token_head_attends_to_the_previous_position(experiments):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        vocab_size=512,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        attn_implementation="eager",
    )
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(config)
    experiments.install_previous_token_head(model)
    attention = model(torch.randint(0, 512, (1, 400)), output_attentions=True).attentions[0][0, 0]
    rows = torch.arange(1, 400)
    assert attention[rows, rows - 1].min().item() > 0.9
