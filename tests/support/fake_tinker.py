"""A fake Tinker service with a table of logits, for the Tinker adapter's tests."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from tinker import types as tt
from tinker.lib.public_interfaces.training_client import TrainingClient

from trainer_adapters.trainer_config import parse_trainer_config

V = 40


def _tinker_config(**loss):
    return parse_trainer_config(
        {
            "trainer": "tinker",
            "tinker": {"base_model": "test/model", "save_every_steps": 1},
            "loss": loss,
            "logging": {"metrics_path": None, "stdout": False},
        }
    )


@dataclass
class _Done:
    value: object

    def result(self):
        return self.value


@dataclass
class _Saved:
    path: str


class FakeTinkerService:
    """A TrainingClient stand-in. `logits_of(ids) -> [t, V]` is the policy (differentiable); every
    forward_backward* backpropagates into its parameters, as the service accumulates gradients until
    optim_step. Built-in losses follow tinker's documented formulas (sums over tokens):
    importance_sampling = -sum(exp(lp - q) A); ppo = -sum(min(r A, clamp(r, lo, hi) A)) with
    lo/hi from loss_fn_config (default 0.8/1.2); cross_entropy = -sum(lp * weights); or reduced
    per datum (`reduction`).
    forward_backward_custom runs the SDK's own `_compute_custom_loss` on the forward logprobs, then
    the cross-entropy surrogate backward with the weights it produced, as the SDK does."""

    def __init__(self, logits_of, *, reduction: str = "sum") -> None:
        self.logits_of = logits_of
        self.reduction = reduction
        """`sum` (tinker's documented reduction) or `per_datum_mean` (skyrl 0.4.0's local server:
        each datum's per-token losses summed under the mask `weights`, default 1, divided by
        max(sum of the mask, 1e-9), then the mean over datums; docs/trainers.md)."""
        self.calls: list[tuple] = []
        self.loss_sum = 0.0

    def _logprobs(self, datum: tt.Datum) -> torch.Tensor:
        targets = datum.loss_fn_inputs["target_tokens"].to_torch().long()
        logits = self.logits_of(datum.model_input.to_ints())
        index = targets if targets.dim() == 2 else targets[:, None]
        lp = torch.log_softmax(logits.float(), -1).gather(-1, index)
        return lp if targets.dim() == 2 else lp[:, 0]

    def _outputs(self, data):
        with torch.no_grad():
            return [{"logprobs": tt.TensorData.from_torch(self._logprobs(d))} for d in data]

    def _token_losses(self, datum, lp, loss_fn, config):
        """(per-token loss, mask) of a built-in loss."""
        inputs = {k: v.to_torch().float() for k, v in datum.loss_fn_inputs.items() if k != "target_tokens"}
        mask = inputs.get("weights", torch.ones_like(lp))
        if loss_fn == "cross_entropy":
            return -lp, mask
        ratio = torch.exp(lp - inputs["logprobs"])
        adv = inputs["advantages"]
        if loss_fn == "importance_sampling":
            return -(ratio * adv), mask
        if loss_fn == "ppo":
            config = config or {}
            lo, hi = config.get("clip_low_threshold", 0.8), config.get("clip_high_threshold", 1.2)
            return -torch.minimum(ratio * adv, ratio.clamp(lo, hi) * adv), mask
        raise AssertionError(f"no local formula for {loss_fn}")

    def _reduced_loss(self, data, loss_fn, config):
        losses = [self._token_losses(d, self._logprobs(d), loss_fn, config) for d in data]
        if self.reduction == "sum":
            return sum((mask * loss).sum() for loss, mask in losses)
        per_datum = [(mask * loss).sum() / mask.sum().clamp(min=1e-9) for loss, mask in losses]
        return sum(per_datum) / len(per_datum)

    def forward(self, data, loss_fn, loss_fn_config=None):
        self.calls.append(("forward", loss_fn, len(data)))
        return _Done(tt.ForwardBackwardOutput("ArrayRecord", self._outputs(data), {}))

    def forward_backward(self, data, loss_fn, loss_fn_config=None):
        self.calls.append(("forward_backward", loss_fn, len(data)))
        total = self._reduced_loss(data, loss_fn, loss_fn_config)
        total.backward()
        self.loss_sum += float(total)
        return _Done(tt.ForwardBackwardOutput("ArrayRecord", self._outputs(data), {"loss:sum": float(total)}))

    def forward_backward_custom(self, data, loss_fn):
        self.calls.append(("forward_backward_custom", len(data)))
        forward = tt.ForwardBackwardOutput("ArrayRecord", self._outputs(data), {})
        custom = TrainingClient._compute_custom_loss(data, loss_fn, forward)
        surrogate = self._reduced_loss(custom.data, "cross_entropy", None)
        surrogate.backward()
        self.loss_sum += custom.loss_sum
        return _Done(
            tt.ForwardBackwardOutput("ArrayRecord", forward.loss_fn_outputs, {"loss:sum": custom.loss_sum})
        )

    def optim_step(self, params):
        self.calls.append(("optim_step", params.learning_rate))
        return _Done(None)

    def save_weights_for_sampler(self, name):
        self.calls.append(("save_weights_for_sampler", name))
        return _Done(_Saved(f"tinker://run/sampler_weights/{name}"))


class LogitTable:
    """A policy that is a table of logits per input sequence (leaf tensors with .grad)."""

    def __init__(self, seed: int = 0, width: int = 16) -> None:
        self.generator = torch.Generator().manual_seed(seed)
        self.width = width
        self.tables: dict[tuple[int, ...], torch.Tensor] = {}

    def __call__(self, ids: list[int]) -> torch.Tensor:
        key = tuple(ids)
        if key not in self.tables:
            self.tables[key] = (torch.randn(len(ids), V, generator=self.generator) * 2).requires_grad_(True)
        return self.tables[key]
