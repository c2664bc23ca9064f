"""The tinker adapter without the tinker service: real SDK types, and a local stand-in for the
service that computes logprobs from real torch logits (a table of logits, or a real transformers
model) and backpropagates tinker's losses as its documentation defines them."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from hermes_opd.contract.errors import ConfigError
from tests.support.fake_tinker import FakeTinkerService, LogitTable, V, _tinker_config
from trainer_adapters.objective import compute_objective
from trainer_adapters.student_logprobs import StudentLogprobs, gather_logprobs
from trainer_adapters.tinker_adapter import TinkerOPDTrainer
from trainer_adapters.tinker_objective import build_objective_step
from trainer_adapters.trainer_config import LossConfig, parse_trainer_config


def make_group(seed: int, scores: list[float] | None = None, gen_len: int = 6) -> dict:
    """Groups of 3 with ragged rows (K = 3 or 4 with the appended student token) and ragged lengths."""
    rng = np.random.default_rng(seed)
    tokens, masks, ids_rows, lp_rows, inference = [], [], [], [], []
    for i in range(3):
        n_gen = gen_len - i
        seq = rng.integers(0, V, 3).tolist() + rng.integers(0, V, n_gen).tolist()
        tokens.append(seq)
        masks.append([-100] * 3 + seq[3:])
        ids, lps = [[], [], []], [[], [], []]
        for pos in range(3, len(seq)):
            if pos == 4:  # an unscored position inside a generated turn
                ids.append([])
                lps.append([])
                continue
            top = rng.choice(V, 3, replace=False).tolist()
            probs = rng.dirichlet(np.ones(4))[:3] * 0.95
            row_lps = np.log(np.sort(probs)[::-1]).tolist()
            if seq[pos] not in top:
                top.append(seq[pos])
                row_lps.append(math.log(0.01))
            ids.append(top)
            lps.append(row_lps)
        ids_rows.append(ids)
        lp_rows.append(lps)
        inference.append([1.0] * 3 + rng.uniform(-4.0, -0.5, n_gen).tolist())
    return {
        "tokens": tokens,
        "masks": masks,
        "scores": scores if scores is not None else [1.0, 0.0, 0.25],
        "inference_logprobs": inference,
        "distill_token_ids": ids_rows,
        "distill_logprobs": lp_rows,
    }


# --- a local tinker service ---------------------------------------------------------------------


def _torch_objective(table: LogitTable, batch, config: LossConfig):
    """The torch trainer's objective (compute_objective) with the student's logprobs from `table`."""
    index = torch.cat([batch.target_ids_BT[..., None], batch.teacher_topk_ids_BTK], dim=-1)
    logits = torch.stack(
        [
            torch.cat(
                [
                    table(batch.input_ids_BT[b, : int(batch.attention_mask_BT[b].sum())].tolist()),
                    torch.zeros(batch.input_ids_BT.shape[1] - int(batch.attention_mask_BT[b].sum()), V),
                ]
            )
            for b in range(batch.batch_size)
        ]
    )
    gathered = gather_logprobs(logits, index)
    return compute_objective(StudentLogprobs(gathered[..., 0], gathered[..., 1:]), batch, config)


# --- the numbers: ratios 1.65 / 1 / 0.37 ------------------------------------------------


def _ratio_group(table: LogitTable) -> dict:
    """One sequence, 2 prompt + 3 generated tokens, per-token advantages +1, +1, -1, and sampler
    logprobs set so that the current/sampler ratios are exactly 1.65, 1.0 and 0.37."""
    tokens = [3, 7, 11, 5, 20]
    with torch.no_grad():
        lp = torch.log_softmax(table(tokens[:-1]), -1).gather(-1, torch.tensor(tokens[1:])[:, None])[:, 0]
    ratios = [1.65, 1.0, 0.37]
    inference = [1.0, 1.0] + [float(lp[j] - math.log(r)) for j, r in zip((1, 2, 3), ratios, strict=True)]
    return {
        "tokens": [tokens],
        "masks": [[-100, -100, *tokens[2:]]],
        "scores": [0.0],
        "advantages": [[0.0, 0.0, 1.0, 1.0, -1.0]],
        "inference_logprobs": [inference],
        "distill_token_ids": [[[] for _ in tokens]],
        "distill_logprobs": [[[] for _ in tokens]],
    }


def test_tinker_optimizes_the_torch_grpo_loss_with_its_clip():
    """Same batch, both trainers: tinker's step now gives the torch trainer's -0.4667 and gradient
    [0, -1/3, 0] (w.r.t. the three tokens' logprobs), not importance_sampling's -0.7603 and
    [-0.550, -0.333, 0.123]."""
    table = LogitTable(seed=5)
    group = _ratio_group(table)
    config = _tinker_config(w_opd=0.0, opd_mode="token")
    service = FakeTinkerService(table)
    metrics = TinkerOPDTrainer(config, service).train_step([group])
    (key,) = table.tables
    grad_tinker = table.tables[key].grad.clone()

    assert service.loss_sum == pytest.approx(-1.4 / 3, abs=1e-5)
    assert metrics["loss/grpo"] == pytest.approx(-1.4 / 3, abs=1e-5)
    assert metrics["loss/total"] == pytest.approx(-1.4 / 3, abs=1e-5)
    assert metrics["grpo/clip_frac"] == pytest.approx(2 / 3, abs=1e-6)
    assert metrics["grpo/ratio_mean"] == pytest.approx((1.65 + 1.0 + 0.37) / 3, abs=1e-5)

    # The torch trainer's objective on the same logits: same value, same gradient.
    table.tables[key].grad = None
    step = build_objective_step([group], config.loss)
    torch_out = _torch_objective(table, step.batch, config.loss)
    torch_out.total.backward()
    assert torch_out.total.item() == pytest.approx(-1.4 / 3, abs=1e-5)
    torch.testing.assert_close(grad_tinker, table.tables[key].grad, atol=1e-7, rtol=1e-5)

    # ... which is d/dlp = [0, -1/3, 0] at the three generated tokens.
    logits = table.tables[key].detach().requires_grad_(True)
    lp = torch.log_softmax(logits, -1).gather(-1, torch.tensor(group["tokens"][0][1:])[:, None])[:, 0]
    (expected,) = torch.autograd.grad(-lp[2] / 3, logits)
    torch.testing.assert_close(grad_tinker, expected, atol=1e-7, rtol=1e-5)


@pytest.mark.parametrize(
    ("mode", "direction", "objective"),
    [
        ("topk", "reverse", "pg"),
        ("topk", "forward", "pg"),
        ("token", "reverse", "pg"),
        ("token", "reverse", "ppo"),
    ],
)
def test_one_custom_call_equals_the_torch_objective_value_and_gradient(mode, direction, objective):
    config = _tinker_config(
        opd_mode=mode, kl_direction=direction, opd_token_objective=objective, w_grpo=0.6, w_opd=0.7
    )
    groups = [make_group(0), make_group(1), make_group(2, scores=[0.5, 0.5, 0.5])]
    table = LogitTable(seed=1)
    service = FakeTinkerService(table)
    metrics = TinkerOPDTrainer(config, service).train_step(groups)
    assert [c[0] for c in service.calls] == [
        "forward_backward_custom",
        "optim_step",
        "save_weights_for_sampler",
    ]
    grads = {key: t.grad.clone() for key, t in table.tables.items()}

    for t in table.tables.values():
        t.grad = None
    step = build_objective_step(groups, config.loss)
    out = _torch_objective(table, step.batch, config.loss)
    out.total.backward()
    assert service.loss_sum == pytest.approx(out.total.item(), rel=1e-5)
    for key, t in table.tables.items():
        torch.testing.assert_close(grads[key], t.grad, atol=1e-7, rtol=1e-4)
    for name, value in out.metrics.items():
        assert metrics[name] == pytest.approx(float(value), rel=1e-5, abs=1e-7), name
    assert metrics["loss/opd"] > 0 and metrics["tinker/datums"] == 9
    assert metrics["optim/step_skipped"] == 0.0


# --- datums -------------------------------------------------------------------------------------


def test_datums_carry_the_student_token_and_the_teacher_row():
    groups = [make_group(0), make_group(1, scores=[0.3, 0.3, 0.3])]
    step = build_objective_step(groups, LossConfig())
    batch = step.batch
    k = batch.teacher_topk_ids_BTK.shape[-1]
    assert k == 4 and step.rows == list(range(6))  # the equal-score group still has teacher rows
    for row, datum in zip(step.rows, step.datums, strict=True):
        t = int(batch.attention_mask_BT[row].sum())
        assert datum.model_input.to_ints() == batch.input_ids_BT[row, :t].tolist()
        inputs = datum.loss_fn_inputs
        assert set(inputs) == {"target_tokens", "weights"}
        assert inputs["target_tokens"].dtype == "int64" and inputs["target_tokens"].shape == [t, 1 + k]
        assert inputs["weights"].dtype == "float32" and inputs["weights"].shape == [t, 1 + k]
        targets, weights = inputs["target_tokens"].to_torch(), inputs["weights"].to_torch()
        assert targets[:, 0].tolist() == batch.target_ids_BT[row, :t].tolist()
        assert torch.equal(weights[:, 0].bool(), batch.loss_mask_BT[row, :t])
        assert torch.equal(weights[:, 1:].bool(), batch.teacher_topk_valid_BTK[row, :t])
        valid = weights[:, 1:].bool()
        assert torch.equal(targets[:, 1:][valid], batch.teacher_topk_ids_BTK[row, :t][valid])
        assert weights[:2].sum() == 0  # prompt targets
    token = build_objective_step(groups, LossConfig(opd_mode="token"))
    assert token.datums[0].loss_fn_inputs["target_tokens"].shape == [token.datums[0].model_input.length]


def test_sequences_without_any_signal_are_not_sent():
    group = make_group(0, scores=[0.3, 0.3, 0.3])
    for rows in (group["distill_token_ids"], group["distill_logprobs"]):
        for seq in rows:
            seq[:] = [[] for _ in seq]
    step = build_objective_step([make_group(1), group], LossConfig())
    assert step.rows == [0, 1, 2] and len(step.datums) == 3 and step.trainable


# --- every term is logged, weight 0 included ----------------------------------------------------


@pytest.mark.parametrize("zero", ["w_grpo", "w_opd"])
def test_zero_weight_terms_are_still_logged(zero):
    groups = [make_group(0), make_group(1)]
    table = LogitTable(seed=2)
    config = _tinker_config(**{zero: 0.0})
    metrics = TinkerOPDTrainer(config, FakeTinkerService(table)).train_step(groups)
    full = _torch_objective(table, build_objective_step(groups, LossConfig()).batch, LossConfig())
    for name in (
        "loss/grpo",
        "loss/opd",
        "grpo/clip_frac",
        "grpo/ratio_mean",
        "grpo/approx_kl",
        "opd/reverse_kl",
        "opd/forward_kl",
        "opd/teacher_topk_mass",
    ):
        assert metrics[name] == pytest.approx(float(full.metrics[name]), rel=1e-5, abs=1e-7), name
    other = "opd" if zero == "w_grpo" else "grpo"
    assert metrics["loss/total"] == pytest.approx(float(full.metrics[f"loss/{other}"]), rel=1e-5)
    assert metrics[f"loss/{zero[2:]}"] != 0.0


# --- nothing to train: no optim_step, still measured --------------------------------------------


def test_nothing_to_train_takes_no_optim_step_and_still_logs_every_term():
    table = LogitTable(seed=3)
    service = FakeTinkerService(table)
    trainer = TinkerOPDTrainer(_tinker_config(w_opd=0.0), service)
    metrics = trainer.train_step([make_group(0, scores=[1.0, 1.0, 1.0])])
    assert [c[0] for c in service.calls] == ["forward", "save_weights_for_sampler"]
    assert service.calls[0][1] == "cross_entropy"
    assert all(t.grad is None for t in table.tables.values())
    assert metrics["optim/step_skipped"] == 1.0 and metrics["optim/skipped_steps"] == 1.0
    assert metrics["loss/grpo"] == 0.0 and metrics["loss/total"] == 0.0
    assert metrics["loss/opd"] > 0  # measured, weight 0
    # Nothing at all to send: no call except the sampler save, and the terms are all 0.
    empty = make_group(1, scores=[1.0, 1.0, 1.0])
    for rows in (empty["distill_token_ids"], empty["distill_logprobs"]):
        for seq in rows:
            seq[:] = [[] for _ in seq]
    metrics = trainer.train_step([empty])
    assert [c[0] for c in service.calls][2:] == ["save_weights_for_sampler"]
    assert metrics["loss/opd"] == 0.0 and metrics["optim/skipped_steps"] == 2.0
    # A trainable step afterwards is not skipped.
    metrics = trainer.train_step([make_group(2)])
    assert metrics["optim/step_skipped"] == 0.0 and metrics["optim/skipped_steps"] == 2.0
    assert [c[0] for c in service.calls][3:] == [
        "forward_backward_custom",
        "optim_step",
        "save_weights_for_sampler",
    ]


def test_one_step_publishes_the_sampler():
    service = FakeTinkerService(LogitTable(seed=4))
    published = []
    trainer = TinkerOPDTrainer(
        _tinker_config(), service, on_new_sampler=lambda path, step: published.append((path, step))
    )
    trainer.train_step([make_group(0), make_group(1)])
    assert service.calls[1] == ("optim_step", 4e-5)
    assert published == [("tinker://run/sampler_weights/hermes-opd-step000001", 1)]
    assert trainer.step == 1


# --- config -------------------------------------------------------------------------------------


def test_tinker_config_rejects_a_student_temperature():
    with pytest.raises(ValueError, match="student_temperature must be 1.0"):
        _tinker_config(student_temperature=0.7)


@pytest.mark.parametrize("loss_fn", ["importance_sampling", "ppo"])
def test_builtin_grpo_losses_are_refused_with_the_reason(loss_fn):
    with pytest.raises(ConfigError, match=f"grpo_loss_fn '{loss_fn}' is not supported.*loss.clip_low"):
        parse_trainer_config({"trainer": "tinker", "tinker": {"base_model": "m", "grpo_loss_fn": loss_fn}})
    with pytest.raises(ConfigError, match="grpo_loss_fn_config is not used any more"):
        parse_trainer_config(
            {
                "trainer": "tinker",
                "tinker": {"base_model": "m", "grpo_loss_fn_config": {"clip_low_threshold": 0.9}},
            }
        )
    config = parse_trainer_config(
        {"trainer": "tinker", "tinker": {"base_model": "m", "grpo_loss_fn_config": None}}
    )
    assert config.tinker.grpo_loss_fn == "custom"


# --- both trainers, one real model --------------------------------------------------------------


def test_torch_trainer_and_tinker_adapter_give_the_same_loss_and_gradient(tmp_path):
    """The reference torch trainer and the tinker adapter (against a service that is the same
    transformers model) on the same batch: the same loss terms and the same parameter gradient."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from trainer_adapters.torch_trainer import TorchTrainer

    torch.manual_seed(0)
    model_dir = tmp_path / "tiny"
    Qwen2ForCausalLM(
        Qwen2Config(
            vocab_size=V,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=1,
            max_position_embeddings=64,
        )
    ).save_pretrained(model_dir)
    loss = {"w_grpo": 0.8, "w_opd": 0.5, "clip_low": 0.1, "clip_high": 0.3}
    torch_trainer = TorchTrainer(
        parse_trainer_config(
            {
                "model": {"path": str(model_dir), "device": "cpu"},
                "optim": {"micro_batch_size": 2},
                "loss": loss,
                "checkpoint": {"dir": str(tmp_path / "ckpt"), "resume": False},
                "logging": {"metrics_path": None, "stdout": False},
            }
        )
    )
    groups = [make_group(0), make_group(1), make_group(2, scores=[0.5, 0.5, 0.5])]
    torch_metrics = torch_trainer.accumulate_gradients(groups)
    params = [p for p in torch_trainer.model.parameters() if p.requires_grad]
    torch_grads = [p.grad.clone() for p in params]
    torch_trainer.optimizer.zero_grad(set_to_none=True)

    model = torch_trainer.model  # the service's policy: the same weights
    service = FakeTinkerService(lambda ids: model(input_ids=torch.tensor([ids])).logits[0])
    tinker_metrics = TinkerOPDTrainer(_tinker_config(**loss), service).train_step(groups)
    assert service.calls[0][0] == "forward_backward_custom"
    assert torch_metrics["grpo/clip_frac"] > 0  # the clip is active in this batch
    for name in (
        "loss/total",
        "loss/grpo",
        "loss/opd",
        "grpo/clip_frac",
        "grpo/ratio_mean",
        "opd/reverse_kl",
    ):
        assert tinker_metrics[name] == pytest.approx(torch_metrics[name], rel=1e-4, abs=1e-6), name
    assert service.loss_sum == pytest.approx(torch_metrics["loss/total"], rel=1e-4)
    for p, want in zip(params, torch_grads, strict=True):
        torch.testing.assert_close(p.grad, want, atol=1e-6, rtol=1e-3)
