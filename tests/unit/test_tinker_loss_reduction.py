"""`tinker.server_loss_reduction`: the objective's gradient reaches a service that reduces built-in
losses per datum (skyrl 0.4.0's local Tinker-API server) exactly, and the SDK's custom-loss surrogate
does not (docs/trainers.md, "Measured through the local server")."""

from __future__ import annotations

import pytest
import torch

from tests.support.fake_tinker import FakeTinkerService, LogitTable
from tests.unit.test_tinker_adapter import _torch_objective, make_group
from trainer_adapters.tinker_adapter import TinkerOPDTrainer
from trainer_adapters.tinker_objective import build_objective_step
from trainer_adapters.trainer_config import parse_trainer_config


def _config(reduction: str, **loss):
    return parse_trainer_config(
        {
            "trainer": "tinker",
            "tinker": {"base_model": "test/model", "server_loss_reduction": reduction},
            "loss": {"opd_mode": "token", **loss},
            "logging": {"metrics_path": None, "stdout": False},
        }
    )


GROUPS = [make_group(0), make_group(1), make_group(2, scores=[0.5, 0.5, 0.5])]


def _reference_grads(config) -> tuple[dict, dict]:
    table = LogitTable(seed=1)
    step = build_objective_step(GROUPS, config.loss)
    out = _torch_objective(table, step.batch, config.loss)
    out.total.backward()
    return {key: t.grad.clone() for key, t in table.tables.items()}, out.metrics


def _service_grads(config, service_reduction: str) -> tuple[dict, dict, list]:
    table = LogitTable(seed=1)
    service = FakeTinkerService(table, reduction=service_reduction)
    metrics = TinkerOPDTrainer(config, service).train_step(GROUPS)
    grads = {
        key: t.grad.clone() if t.grad is not None else torch.zeros_like(t) for key, t in table.tables.items()
    }
    return grads, metrics, [c[:2] for c in service.calls]


@pytest.mark.parametrize("loss", [{"w_grpo": 0.0}, {"w_grpo": 0.6, "w_opd": 0.7}])
def test_per_datum_mean_gives_the_objective_gradient_exactly(loss):
    config = _config("per_datum_mean", **loss)
    expected, expected_metrics = _reference_grads(config)
    grads, metrics, calls = _service_grads(config, "per_datum_mean")
    assert calls == [
        ("forward", "cross_entropy"),
        ("forward_backward", "importance_sampling"),
        ("optim_step", config.tinker.learning_rate),
        ("save_weights_for_sampler", "hermes-opd-step000001"),
    ]
    for key, grad in expected.items():
        torch.testing.assert_close(grads[key], grad, atol=1e-7, rtol=1e-4)
    for name, value in expected_metrics.items():
        assert metrics[name] == pytest.approx(float(value), rel=1e-5, abs=1e-7), name


def test_the_sdk_custom_surrogate_is_rescaled_per_datum_by_such_a_server():
    """The defect `per_datum_mean` avoids: forward_backward_custom's weights (-dC/dlp) are signed,
    so each datum's gradient is divided by their sum, or multiplied by 1e9 where it is <= 0."""
    config = _config("sum", w_grpo=0.0)
    expected, _ = _reference_grads(config)
    right, _, _ = _service_grads(config, "sum")
    wrong, _, _ = _service_grads(config, "per_datum_mean")
    flat = torch.cat([expected[k].flatten() for k in expected])
    torch.testing.assert_close(torch.cat([right[k].flatten() for k in expected]), flat, atol=1e-7, rtol=1e-4)
    off = torch.cat([wrong[k].flatten() for k in expected])
    cosine = float(torch.nn.functional.cosine_similarity(off, flat, dim=0))
    assert cosine < 0.99, cosine


def test_per_datum_mean_refuses_topk_datums():
    config = _config("per_datum_mean", opd_mode="topk")
    service = FakeTinkerService(LogitTable(seed=1), reduction="per_datum_mean")
    with pytest.raises(ValueError, match="opd_mode: token"):
        TinkerOPDTrainer(config, service).train_step(GROUPS)
