"""How far the SDK's custom-loss surrogate's gradient is from the objective's under skyrl's per-datum
reduction (docs/trainers.md, item 8 of the local server's differences).

For each GROUPS.jsonl (the suite's stand-in scores applied) and each arm (OPD only, GRPO + OPD,
token mode), the torch model (the Qwen3 dev model with a LoRA adapter, rank 8, alpha 32, B drawn
from N(0, 0.01) so that every LoRA parameter has a gradient) stands behind the fake service
(tests/support/fake_tinker.py) and one adapter step's gradient is compared with the exact one:
`sdk_custom` (forward_backward_custom, reduced per datum as the local server does) and
`per_datum_mean` (tinker.server_loss_reduction: per_datum_mean, the adapter's own surrogate).

  PYTHONPATH=. .venv/bin/python scripts/tinker_surrogate_cosine.py GROUPS.jsonl [...]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

from hermes_opd.devkit.paths import default_qwen3_dev_model_dir
from tests.support.fake_tinker import FakeTinkerService
from trainer_adapters.tinker_adapter import TinkerOPDTrainer
from trainer_adapters.torch_trainer import TorchTrainer
from trainer_adapters.trainer_config import parse_trainer_config

SCORE_PATTERN = [1.0, 0.0, 0.0, 0.5]
CASES = (
    ("exact", "sum", "sum"),
    ("sdk_custom", "sum", "per_datum_mean"),
    ("per_datum_mean", "per_datum_mean", "per_datum_mean"),
)
"""(name, the adapter's server_loss_reduction, the fake service's reduction)."""


def main(paths: list[str]) -> int:
    model_dir = str(default_qwen3_dev_model_dir())
    for path in paths:
        groups = [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
        groups = [{**g, "scores": SCORE_PATTERN[: len(g["scores"])]} for g in groups[:-1]] + groups[-1:]
        for arm, loss in {"opd": {"w_grpo": 0.0}, "both": {}}.items():
            torch_trainer = TorchTrainer(
                parse_trainer_config(
                    {
                        "trainer": "torch",
                        "model": {
                            "path": model_dir,
                            "device": "cpu",
                            "dtype": "float32",
                            "lora": {"enabled": True, "r": 8, "alpha": 32.0},
                        },
                        "loss": {"opd_mode": "token", **loss},
                        "logging": {"metrics_path": None, "stdout": False},
                    }
                )
            )
            model = torch_trainer.model
            torch.manual_seed(0)
            with torch.no_grad():
                for name, p in model.named_parameters():
                    if "lora_B" in name:
                        p.normal_(0, 0.01)
            params = [p for p in model.parameters() if p.requires_grad]
            grads = {}
            for name, reduction, served in CASES:
                for p in params:
                    p.grad = None
                config = parse_trainer_config(
                    {
                        "trainer": "tinker",
                        "tinker": {
                            "base_model": model_dir,
                            "server_loss_reduction": reduction,
                            "save_every_steps": 100,
                        },
                        "loss": {"opd_mode": "token", **loss},
                        "logging": {"metrics_path": None, "stdout": False},
                    }
                )
                service = FakeTinkerService(
                    lambda ids, model=model: model(input_ids=torch.tensor([ids])).logits[0],
                    reduction=served,
                )
                TinkerOPDTrainer(config, service).train_step(groups)
                grads[name] = torch.cat([p.grad.flatten() for p in params])
            exact = grads["exact"]
            for name in ("sdk_custom", "per_datum_mean"):
                cosine = float(torch.nn.functional.cosine_similarity(grads[name], exact, dim=0))
                ratio = float(grads[name].norm() / exact.norm())
                print(
                    json.dumps(
                        {"groups": path, "arm": arm, "path": name, "cosine": cosine, "norm_ratio": ratio}
                    )
                )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
