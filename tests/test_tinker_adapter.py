"""The tinker adapter without the tinker service: real SDK types, the custom loss run locally."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pytest
import torch
from tinker import types as tt
from tinker.lib.public_interfaces.training_client import TrainingClient

from trainer_adapters.objective import compute_objective
from trainer_adapters.student_logprobs import StudentLogprobs, gather_logprobs
from trainer_adapters.tinker_adapter import TEACHER_LOGPROBS_KEY, TinkerOPDTrainer, build_step
from trainer_adapters.trainer_config import LossConfig, parse_trainer_config

V = 40


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


def _tinker_config(**loss):
    return parse_trainer_config(
        {
            "trainer": "tinker",
            "tinker": {"base_model": "test/model", "save_every_steps": 1},
            "loss": loss,
            "logging": {"metrics_path": None, "stdout": False},
        }
    )


# --- datums -----------------------------------------------------------------------------------


def test_grpo_datum_shapes_dtypes_and_scaled_advantages():
    groups = [make_group(0), make_group(1, scores=[0.3, 0.3, 0.3])]
    step = build_step(groups, LossConfig(w_grpo=0.5))
    batch = step.batch
    assert step.grpo_rows == [0, 1, 2]  # the equal-score group has no GRPO datum ...
    assert len(step.opd) == 6  # ... but all of its sequences still train OPD
    n_gen = batch.num_generated_tokens
    for row, datum in zip(step.grpo_rows, step.grpo, strict=True):
        t = int(batch.attention_mask_BT[row].sum())
        assert datum.model_input.length == t
        assert datum.model_input.to_ints() == batch.input_ids_BT[row, :t].tolist()
        inputs = datum.loss_fn_inputs
        assert set(inputs) == {"target_tokens", "logprobs", "advantages"}
        assert inputs["target_tokens"].dtype == "int64" and inputs["target_tokens"].shape == [t]
        assert inputs["logprobs"].dtype == "float32" and inputs["advantages"].dtype == "float32"
        assert inputs["target_tokens"].to_torch().tolist() == batch.target_ids_BT[row, :t].tolist()
        expected = batch.advantages_BT[row, :t] * batch.loss_mask_BT[row, :t] * 0.5 / n_gen
        torch.testing.assert_close(inputs["advantages"].to_torch(), expected)
        torch.testing.assert_close(inputs["logprobs"].to_torch(), batch.inference_logprobs_BT[row, :t])
        assert inputs["advantages"].to_torch()[:2].abs().sum() == 0  # prompt targets: no gradient


def test_opd_topk_datums_are_T_by_K():
    step = build_step([make_group(0)], LossConfig(opd_mode="topk"))
    batch = step.batch
    k = batch.teacher_topk_ids_BTK.shape[-1]
    assert k == 4
    for b, datum in enumerate(step.opd):
        t = int(batch.attention_mask_BT[b].sum())
        inputs = datum.loss_fn_inputs
        assert inputs["target_tokens"].shape == [t, k] and inputs["target_tokens"].dtype == "int64"
        assert inputs["weights"].shape == [t, k] and inputs["weights"].dtype == "float32"
        assert inputs[TEACHER_LOGPROBS_KEY].shape == [t, k]
        weights = inputs["weights"].to_torch()
        assert set(weights.unique().tolist()) <= {0.0, 1.0}
        assert torch.equal(weights.bool(), batch.teacher_topk_valid_BTK[b, :t])
        ids = inputs["target_tokens"].to_torch()
        assert torch.equal(ids[weights.bool()], batch.teacher_topk_ids_BTK[b, :t][weights.bool()])
        assert weights[:2].sum() == 0 and weights[3].sum() == 0  # prompt and the unscored position


def test_opd_token_datums_are_T():
    step = build_step([make_group(0)], LossConfig(opd_mode="token"))
    datum = step.opd[0]
    t = datum.model_input.length
    assert datum.loss_fn_inputs["target_tokens"].shape == [t]
    assert (
        datum.loss_fn_inputs["target_tokens"].to_torch().tolist() == step.batch.target_ids_BT[0, :t].tolist()
    )
    torch.testing.assert_close(
        datum.loss_fn_inputs[TEACHER_LOGPROBS_KEY].to_torch(), step.batch.teacher_token_logprobs_BT[0, :t]
    )


def test_missing_inference_logprobs_is_an_error_for_grpo():
    group = make_group(0)
    del group["inference_logprobs"]
    with pytest.raises(ValueError, match="no inference_logprobs"):
        build_step([group], LossConfig())
    assert build_step([group], LossConfig(w_grpo=0.0)).grpo == []


# --- the custom loss equals the torch loss ----------------------------------------------------


def _service_logprobs(logits_BTV: torch.Tensor, datums: list[tt.Datum]) -> list[torch.Tensor]:
    """What the service computes: log_softmax over the vocabulary at each input position,
    gathered at target_tokens (shape [T] or [T, K])."""
    out = []
    for b, datum in enumerate(datums):
        targets = datum.loss_fn_inputs["target_tokens"].to_torch().long()
        t = targets.shape[0]
        index = targets if targets.dim() == 2 else targets[:, None]
        lp = torch.log_softmax(logits_BTV[b, :t], -1).gather(-1, index)
        out.append(lp if targets.dim() == 2 else lp[:, 0])
    return out


def _torch_opd(logits_BTV: torch.Tensor, batch, config: LossConfig) -> torch.Tensor:
    index = torch.cat([batch.target_ids_BT[..., None], batch.teacher_topk_ids_BTK], dim=-1)
    gathered = gather_logprobs(logits_BTV, index)
    student = StudentLogprobs(gathered[..., 0], gathered[..., 1:])
    return compute_objective(student, batch, config.model_copy(update={"w_grpo": 0.0})).total


@pytest.mark.parametrize(
    ("mode", "direction"), [("topk", "reverse"), ("topk", "forward"), ("token", "reverse")]
)
def test_custom_loss_and_gradient_match_the_torch_loss(mode, direction):
    config = LossConfig(opd_mode=mode, kl_direction=direction, w_opd=0.7)
    step = build_step([make_group(0), make_group(1)], config)
    assert len(step.opd) == step.batch.batch_size  # datum i is batch row i (every sequence has rows)
    base = torch.randn(6, 8, V, generator=torch.Generator().manual_seed(0))

    logits_a = base.clone().requires_grad_(True)
    loss_a, metrics = step.opd_loss_fn(step.opd, _service_logprobs(logits_a, step.opd))
    (grad_a,) = torch.autograd.grad(loss_a, logits_a)

    logits_b = base.clone().requires_grad_(True)
    loss_b = _torch_opd(logits_b, step.batch, config)
    (grad_b,) = torch.autograd.grad(loss_b, logits_b)

    assert loss_a.item() == pytest.approx(loss_b.item(), rel=1e-5)
    if mode == "topk":
        assert loss_a.item() > 0
    torch.testing.assert_close(grad_a, grad_b, atol=1e-7, rtol=1e-4)
    assert metrics["loss/opd"] == pytest.approx(loss_b.item() / 0.7, rel=1e-5)


def test_custom_loss_through_the_sdk_surrogate_reproduces_the_torch_gradient():
    """The SDK turns our loss into per-entry weights (-dL/dlogprobs) for a cross-entropy backward on
    the service. Running that surrogate locally must give the torch trainer's gradient."""
    config = LossConfig(opd_mode="topk", w_opd=1.0)
    step = build_step([make_group(2)], config)
    base = torch.randn(3, 8, V, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        forward = tt.ForwardBackwardOutput(
            loss_fn_output_type="ArrayRecord",
            loss_fn_outputs=[
                {"logprobs": tt.TensorData.from_torch(lp)} for lp in _service_logprobs(base, step.opd)
            ],
        )
    result = TrainingClient._compute_custom_loss(step.opd, step.opd_loss_fn, forward)
    logits = base.clone().requires_grad_(True)
    surrogate = sum(
        -(lp * datum.loss_fn_inputs["weights"].to_torch()).sum()
        for lp, datum in zip(_service_logprobs(logits, result.data), result.data, strict=True)
    )
    (grad_service,) = torch.autograd.grad(surrogate, logits)
    logits_torch = base.clone().requires_grad_(True)
    (grad_torch,) = torch.autograd.grad(_torch_opd(logits_torch, step.batch, config), logits_torch)
    torch.testing.assert_close(grad_service, grad_torch, atol=1e-7, rtol=1e-4)
    assert result.loss_sum == pytest.approx(_torch_opd(base, step.batch, config).item(), rel=1e-5)


def test_grpo_datums_under_tinker_ppo_equal_the_weighted_torch_grpo_loss():
    """tinker's ppo loss is -sum(min(r A, clip(r) A)) over tokens (its docs). With our scaled
    advantages it equals w_grpo * the torch trainer's token-mean GRPO loss, value and gradient."""
    from trainer_adapters.losses import grpo_loss

    w = 0.8
    step = build_step([make_group(3), make_group(4)], LossConfig(w_grpo=w))
    batch = step.batch
    base = torch.randn(6, 8, V, generator=torch.Generator().manual_seed(2)) * 2

    logits_a = base.clone().requires_grad_(True)
    total = 0.0
    for lp, datum in zip(_service_logprobs(logits_a, step.grpo), step.grpo, strict=True):
        ratio = torch.exp(lp - datum.loss_fn_inputs["logprobs"].to_torch())
        adv = datum.loss_fn_inputs["advantages"].to_torch()
        total = total - torch.minimum(ratio * adv, ratio.clamp(0.8, 1.2) * adv).sum()
    (grad_a,) = torch.autograd.grad(total, logits_a)

    logits_b = base.clone().requires_grad_(True)
    lp = gather_logprobs(logits_b, batch.target_ids_BT[..., None])[..., 0]
    torch_loss = grpo_loss(lp, batch.inference_logprobs_BT, batch.advantages_BT, batch.loss_mask_BT).value
    (grad_b,) = torch.autograd.grad(w * torch_loss, logits_b)
    assert total.item() == pytest.approx(w * torch_loss.item(), rel=1e-5)
    torch.testing.assert_close(grad_a, grad_b, atol=1e-7, rtol=1e-4)


# --- the step loop against a fake training client ---------------------------------------------


@dataclass
class _Done:
    value: object

    def result(self):
        return self.value


@dataclass
class _Saved:
    path: str


class FakeTrainingClient:
    """Records the calls; answers like the service would, computing logprobs from local logits."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []
        self.logits = torch.randn(8, 10, V, generator=torch.Generator().manual_seed(3))

    def forward_backward(self, data, loss_fn, loss_fn_config=None):
        self.calls.append(("forward_backward", loss_fn, len(data)))
        outputs = [{"logprobs": tt.TensorData.from_torch(lp)} for lp in _service_logprobs(self.logits, data)]
        return _Done(tt.ForwardBackwardOutput("ArrayRecord", outputs, {"loss:sum": 1.5}))

    def forward_backward_custom(self, data, loss_fn):
        self.calls.append(("forward_backward_custom", len(data)))
        outputs = [{"logprobs": tt.TensorData.from_torch(lp)} for lp in _service_logprobs(self.logits, data)]
        TrainingClient._compute_custom_loss(data, loss_fn, tt.ForwardBackwardOutput("ArrayRecord", outputs))
        return _Done(tt.ForwardBackwardOutput("ArrayRecord", outputs))

    def optim_step(self, params):
        self.calls.append(("optim_step", params.learning_rate))
        return _Done(None)

    def save_weights_for_sampler(self, name):
        self.calls.append(("save_weights_for_sampler", name))
        return _Done(_Saved(f"tinker://run/sampler_weights/{name}"))


def test_one_step_calls_both_losses_then_one_optim_step():
    client = FakeTrainingClient()
    published = []
    trainer = TinkerOPDTrainer(
        _tinker_config(), client, on_new_sampler=lambda path, step: published.append((path, step))
    )
    metrics = trainer.train_step([make_group(0), make_group(1)])
    assert [c[0] for c in client.calls] == [
        "forward_backward",
        "forward_backward_custom",
        "optim_step",
        "save_weights_for_sampler",
    ]
    assert client.calls[0][1] == "importance_sampling" and client.calls[2][1] == 4e-5
    assert published == [("tinker://run/sampler_weights/hermes-opd-step000001", 1)]
    assert trainer.step == 1
    for key in ("loss/grpo", "loss/opd", "opd/reverse_kl", "grpo/clip_frac", "grpo/service_loss_sum"):
        assert math.isfinite(metrics[key]), key
    assert metrics["loss/opd"] > 0 and metrics["tinker/opd_datums"] == 6


def test_equal_score_batch_trains_opd_and_zero_weight_skips_its_call():
    client = FakeTrainingClient()
    trainer = TinkerOPDTrainer(_tinker_config(), client)
    trainer.train_step([make_group(0, scores=[1.0, 1.0, 1.0])])
    assert [c[0] for c in client.calls[:2]] == ["forward_backward_custom", "optim_step"]

    client = FakeTrainingClient()
    TinkerOPDTrainer(_tinker_config(w_opd=0.0), client).train_step([make_group(0)])
    assert [c[0] for c in client.calls[:2]] == ["forward_backward", "optim_step"]

    # nothing to train on: no optim_step (Adam's momentum would still move the weights)
    client = FakeTrainingClient()
    TinkerOPDTrainer(_tinker_config(w_opd=0.0), client).train_step([make_group(0, scores=[1.0, 1.0, 1.0])])
    assert [c[0] for c in client.calls] == ["save_weights_for_sampler"]


def test_tinker_config_rejects_a_student_temperature():
    with pytest.raises(ValueError, match="student_temperature must be 1.0"):
        _tinker_config(student_temperature=0.7)
