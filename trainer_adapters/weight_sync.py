"""Getting new weights into the inference server after a checkpoint (docs/trainers.md, "Weight sync").

Two hooks, both fed the checkpoint directory that was just written:
- `command`: run an argv (no shell) with `{checkpoint}` (the checkpoint's model/ directory) and
  `{step}` substituted, e.g. a script that restarts vLLM on the new weights, or one that copies
  them elsewhere. Works for full and LoRA training.
- `vllm_lora`: POST the adapter to vLLM's /v1/load_lora_adapter. Needs LoRA training, a vLLM
  started with --enable-lora (and --max-lora-rank >= r), and VLLM_ALLOW_RUNTIME_LORA_UPDATING=1 in
  its environment. `lora_naming: per_step` (default) loads `<lora_name>-step<N>` and unloads older
  ones; the env (`policy_lora_prefix`) samples with the newest. `lora_naming: inplace` replaces
  `<lora_name>` with `load_inplace`, which vLLM 0.32 re-reads from disk on every engine step.
"""

from __future__ import annotations

import logging
import subprocess
from collections.abc import Callable
from pathlib import Path

import httpx

from hermes_opd.contract.errors import HermesOPDError
from hermes_opd.contract.policy_version import adapter_name
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


def _post(http: httpx.Client, url: str, body: dict) -> httpx.Response:
    try:
        return http.post(url, json=body)
    except httpx.HTTPError as exc:
        raise WeightSyncError(f"vLLM unreachable at {url}: {exc}") from exc


def load_lora_adapter(http: httpx.Client, base_url: str, name: str, path: Path, **extra: bool) -> None:
    """POST `path` as the adapter `name` to vLLM's {base_url}/v1/load_lora_adapter (`extra`: e.g.
    `load_inplace`); raises WeightSyncError if vLLM is unreachable or refuses it."""
    body = {"lora_name": name, "lora_path": str(path), **extra}
    response = _post(http, f"{base_url.rstrip('/')}/v1/load_lora_adapter", body)
    if response.status_code != 200:
        raise WeightSyncError(
            f"vLLM load_lora_adapter {name!r} answered {response.status_code}: {response.text[:1000]}"
        )


def unload_lora_adapter(http: httpx.Client, base_url: str, name: str) -> bool:
    """Unload the adapter `name`; a failure is logged, not raised (the new weights, or the caller's
    own result, matter more). vLLM answers an unload with plain text, so only the status is read."""
    try:
        gone = _post(http, f"{base_url.rstrip('/')}/v1/unload_lora_adapter", {"lora_name": name})
    except WeightSyncError as exc:
        logger.warning("could not unload adapter %r: %s", name, exc)
        return False
    if gone.status_code != 200:
        logger.warning("vLLM unload_lora_adapter %r answered %d: %s", name, gone.status_code, gone.text[:300])
    return gone.status_code == 200


def vllm_lora_sync(
    base_url: str,
    lora_name: str,
    *,
    load_inplace: bool,
    timeout_s: float,
    transport: httpx.BaseTransport | None = None,
) -> WeightSync:
    """Load each checkpoint under the one name `lora_name` (`load_inplace` replaces it).

    vLLM 0.32 stores the request with `load_inplace: true` and passes it to the engine with every
    request that names the adapter; `LRUCacheWorkerLoRAManager.add_adapter` (vllm/lora/
    worker_manager.py) then loads the adapter from disk again on every engine step that serves it.
    `vllm_lora_step_sync` avoids that cost."""

    def sync(checkpoint: Path, step: int) -> None:
        with httpx.Client(timeout=timeout_s, transport=transport) as http:
            load_lora_adapter(
                http, base_url, lora_name, (checkpoint / "model").resolve(), load_inplace=load_inplace
            )
        logger.info("vLLM loaded adapter %r from step %d", lora_name, step)

    return sync


def vllm_lora_step_sync(
    base_url: str,
    prefix: str,
    *,
    keep_adapters: int,
    timeout_s: float,
    transport: httpx.BaseTransport | None = None,
) -> WeightSync:
    """Load each checkpoint as a NEW adapter `<prefix>-step<N>` (hermes_opd/contract/policy_version.py),
    then unload this trainer's adapters older than the newest `keep_adapters`.

    A fresh name is loaded once, never re-read per request (unlike `load_inplace`); keeping the
    previous adapter(s) lets rollouts that started on them finish. An unload that fails is logged,
    not fatal: the new weights are already in place."""
    loaded: list[str] = []

    def sync(checkpoint: Path, step: int) -> None:
        name = adapter_name(prefix, step)
        with httpx.Client(timeout=timeout_s, transport=transport) as http:
            load_lora_adapter(http, base_url, name, (checkpoint / "model").resolve())
            loaded.append(name)
            while len(loaded) > keep_adapters:
                unload_lora_adapter(http, base_url, loaded.pop(0))
        logger.info("vLLM loaded adapter %r (step %d)", name, step)

    return sync


def make_weight_sync(config: WeightSyncConfig) -> WeightSync | None:
    if config.mode == "none":
        return None
    if config.mode == "command":
        return command_sync(config.command, config.timeout_s)
    if config.lora_naming == "per_step":
        return vllm_lora_step_sync(
            config.vllm_url, config.lora_name, keep_adapters=config.keep_adapters, timeout_s=config.timeout_s
        )
    return vllm_lora_sync(
        config.vllm_url, config.lora_name, load_inplace=config.load_inplace, timeout_s=config.timeout_s
    )
