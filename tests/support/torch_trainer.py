"""A tiny model, groups and configs for the reference torch trainer's tests."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch

from trainer_adapters.trainer_config import TorchTrainerConfig, parse_trainer_config

VOCAB = 300


K = 4


TEACHER_PROBS = [0.6, 0.2, 0.07, 0.03]


TEACHER_IDS = [10, 11, 12, 13]


def teacher_row(token: int) -> tuple[list[int], list[float]]:
    """The teacher's top-K at a generated position: 90% of its mass on four fixed ids (a rule a
    tiny model learns in a few steps and that carries over to held-out sequences); the student's
    token is appended (as the env does) when it is not among them."""
    ids = list(TEACHER_IDS)
    lps = [math.log(p) for p in TEACHER_PROBS]
    if token not in ids:
        ids.append(token)
        lps.append(math.log(0.05 / (VOCAB - K)))
    return ids, lps


def make_group(rng: np.random.Generator, group_size: int = 4, prompt_len: int = 4, gen_len: int = 12) -> dict:
    tokens, masks, rows_ids, rows_lps, inference = [], [], [], [], []
    for _ in range(group_size):
        seq = rng.integers(0, VOCAB, prompt_len).tolist()
        seq += rng.integers(0, VOCAB, gen_len).tolist()  # the student's (near-uniform) samples
        tokens.append(seq)
        masks.append([-100] * prompt_len + seq[prompt_len:])
        ids_rows, lp_rows = [[] for _ in range(prompt_len)], [[] for _ in range(prompt_len)]
        for pos in range(prompt_len, len(seq)):
            ids, lps = teacher_row(seq[pos])
            ids_rows.append(ids)
            lp_rows.append(lps)
        rows_ids.append(ids_rows)
        rows_lps.append(lp_rows)
        inference.append([1.0] * prompt_len + [-math.log(VOCAB)] * gen_len)
    return {
        "tokens": tokens,
        "masks": masks,
        "scores": rng.integers(0, 2, group_size).astype(float).tolist(),
        "inference_logprobs": inference,
        "distill_token_ids": rows_ids,
        "distill_logprobs": rows_lps,
        "overrides": [{"opd": {"format_version": 1, "mode": "topk", "k": K}} for _ in range(group_size)],
    }


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory) -> Path:
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
        tie_word_embeddings=False,
    )
    path = tmp_path_factory.mktemp("tiny-qwen2")
    Qwen2ForCausalLM(config).save_pretrained(path)
    return path


def make_config(model_dir: Path, run_dir: Path, **overrides) -> TorchTrainerConfig:
    data = {
        "num_steps": 6,
        "atropos": {
            "batch_size": 8,
            "max_token_len": 64,
            "poll_initial_s": 0.05,
            "poll_max_s": 0.2,
            "poll_timeout_s": 60,
        },
        "model": {"path": str(model_dir), "device": "cpu"},
        "optim": {"lr": 3e-3, "micro_batch_size": 4},
        "loss": {"w_grpo": 1.0, "w_opd": 1.0},
        "checkpoint": {"dir": str(run_dir / "ckpt"), "every_steps": 3, "keep_last": 2},
        "logging": {"metrics_path": str(run_dir / "metrics.jsonl"), "stdout": False},
    }
    for dotted, value in overrides.items():
        section, key = dotted.split("__")
        data.setdefault(section, {})[key] = value
    return parse_trainer_config(data)
