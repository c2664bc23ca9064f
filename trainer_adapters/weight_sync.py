"""Getting new weights into the inference server after a checkpoint (docs/trainers.md, "Weight sync").

Two hooks, both fed the checkpoint directory that was just written:
- `command`: run an argv (no shell) with `{checkpoint}` (the checkpoint's model/ directory) and
  `{step}` substituted, e.g. a script that restarts vLLM on the new weights, or one that copies
  them elsewhere. Works for full and LoRA training.
- `vllm_lora`: POST {"lora_name", "lora_path", "load_inplace"} to vLLM's /v1/load_lora_adapter.
  Needs LoRA training, a vLLM started with --enable-lora (and --max-lora-rank >= r), and
  VLLM_ALLOW_RUNTIME_LORA_UPDATING=1 in its environment. The env then samples with
  model=<lora_name>.
"""

from __future__ import annotations

import logging
import subprocess
from collections.abc import Callable
from pathlib import Path

import httpx

from hermes_opd.contract.errors import HermesOPDError
from trainer_adapters.trainer_config import WeightSyncConfig

logger = logging.getLogger(__name__)

WeightSync = Callable[[Path, int], None]
"""(checkpoint directory step_<N>/, step N) -> None; raises WeightSyncError on failure."""


class WeightSyncError(HermesOPDError, RuntimeError):
    """The inference server did not take the new weights."""


def command_sync(argv: list[str], timeout_s: float) -> WeightSync:
    def sync(checkpoint: Path, step: int) -> None:
        model_dir = str((checkpoint / "model").resolve())
        args = [a.replace("{checkpoint}", model_dir).replace("{step}", str(step)) for a in argv]
        try:
            done = subprocess.run(args, capture_output=True, text=True, timeout=timeout_s, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise WeightSyncError(f"weight sync command {args} failed: {exc}") from exc
        if done.returncode != 0:
            raise WeightSyncError(
                f"weight sync command {args} exited {done.returncode}: {done.stderr.strip()[-1000:]}"
            )
        logger.info("weight sync command done for step %d", step)

    return sync


def vllm_lora_sync(
    base_url: str,
    lora_name: str,
    *,
    load_inplace: bool,
    timeout_s: float,
    transport: httpx.BaseTransport | None = None,
) -> WeightSync:
    def sync(checkpoint: Path, step: int) -> None:
        body = {
            "lora_name": lora_name,
            "lora_path": str((checkpoint / "model").resolve()),
            "load_inplace": load_inplace,
        }
        try:
            with httpx.Client(timeout=timeout_s, transport=transport) as http:
                response = http.post(f"{base_url.rstrip('/')}/v1/load_lora_adapter", json=body)
        except httpx.HTTPError as exc:
            raise WeightSyncError(f"vLLM load_lora_adapter unreachable at {base_url}: {exc}") from exc
        if response.status_code != 200:
            raise WeightSyncError(
                f"vLLM load_lora_adapter answered {response.status_code}: {response.text[:1000]}"
            )
        logger.info("vLLM loaded adapter %r from step %d", lora_name, step)

    return sync


def make_weight_sync(config: WeightSyncConfig) -> WeightSync | None:
    if config.mode == "none":
        return None
    if config.mode == "command":
        return command_sync(config.command, config.timeout_s)
    return vllm_lora_sync(
        config.vllm_url, config.lora_name, load_inplace=config.load_inplace, timeout_s=config.timeout_s
    )
