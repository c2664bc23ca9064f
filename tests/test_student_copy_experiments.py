"""scripts/student_copy_experiments.py: the parts its findings in docs/learning.md rest on."""

from __future__ import annotations

import argparse
import importlib.util
import random
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "student_copy_experiments.py"


@pytest.fixture(scope="module")
def experiments():
    spec = importlib.util.spec_from_file_location("student_copy_experiments", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _args(**overrides) -> argparse.Namespace:
    values = {"seed": 0, "pseudo": 50, "induct_pool": "pieces", "induct_len": 8, "fixed_offset": False,
              "verbatim": True}  # fmt: skip
    return argparse.Namespace(**{**values, **overrides})


@pytest.fixture(scope="module")
def corpus(experiments):
    return experiments.Corpus(_args())


def test_previous_token_head_attends_to_the_previous_position(experiments):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(vocab_size=512, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, attn_implementation="eager")  # fmt: skip
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(config)
    experiments.install_previous_token_head(model)
    attention = model(torch.randint(0, 512, (1, 400)), output_attentions=True).attentions[0][0, 0]
    rows = torch.arange(1, 400)
    assert attention[rows, rows - 1].min().item() > 0.9


def test_verbatim_writes_the_backtick_tokens_after_def_and_the_same_text(corpus):
    messages = [
        {"role": "user", "content": "Name it `compute_mileage`."},
        {"role": "assistant", "content": "def compute_mileage(x):\n    return x\n"},
    ]
    ids = corpus.encode(messages, None)
    tok = corpus.tok
    canonical = tok.apply_chat_template(messages, tokenize=False)
    assert tok.decode(ids) == canonical
    name = tok.encode("compute_mileage", add_special_tokens=False)
    def_at = max(i for i, t in enumerate(ids) if tok.convert_ids_to_tokens(t) == "def")
    assert ids[def_at + 1 : def_at + 2 + len(name)] == [corpus.space, *name]
    assert tok.encode(canonical, add_special_tokens=False) != ids  # canonical BPE writes `Ġcompute`


def test_induction_rows_target_exactly_the_second_copy(corpus):
    corpus.rng = random.Random(3)
    for ids, mask in corpus.induction_rows(20):
        targets = [t for t, m in zip(ids, mask, strict=True) if m]
        length = len(targets) + 1
        assert ids[-length:][1:] == targets
        first_copy = ids[: len(ids) - length]
        assert any(first_copy[i : i + length] == ids[-length:] for i in range(len(first_copy)))
        assert mask[: len(ids) - length + 1] == [False] * (len(ids) - length + 1)


def test_pseudo_words_never_use_a_convention_value(corpus):
    from environments.tasks.conventions import convention_values

    assert not set(corpus.words) & convention_values()
    assert len(corpus.words) >= 50
