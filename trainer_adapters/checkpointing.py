"""Checkpoints of the reference trainer: save atomically, find the latest, restore the state.

Layout of `<root>/step_<N>/` (N = optimizer steps completed):
  model/               save_pretrained output: the full model, or only the LoRA adapter (peft)
  optimizer.pt         optimizer + LR scheduler state and torch RNG state
  trainer_state.json   {"step": N, "lora": bool, "format_version": 1}; written last
A checkpoint is first written to `.step_<N>.tmp/` and renamed into place, so a crash mid-save
never leaves a directory that `latest_checkpoint` would pick.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

import torch
from torch import nn

FORMAT_VERSION = 1
_STEP_DIR = re.compile(r"^step_(\d+)$")
_TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "vocab.json",
    "merges.txt",
    "tokenizer.model",
    "chat_template.jinja",
    "added_tokens.json",
)


def checkpoint_dir(root: Path, step: int) -> Path:
    return root / f"step_{step:08d}"


def save_checkpoint(
    root: Path,
    step: int,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: Any,
    *,
    lora: bool,
    tokenizer_source: str | None = None,
    keep_last: int | None = None,
    keep_every: int = 0,
) -> Path:
    """Write step_<N>/ atomically and prune all but the newest `keep_last` checkpoints, except those
    whose step is a multiple of `keep_every` (when > 0), which are kept.

    Tokenizer files next to `tokenizer_source` (the base model directory) are copied into model/
    of a full checkpoint so that the directory can be served by vLLM as it is."""
    root.mkdir(parents=True, exist_ok=True)
    tmp = root / f".step_{step:08d}.tmp"
    if tmp.exists():
        shutil.rmtree(tmp)
    model.save_pretrained(tmp / "model")
    if tokenizer_source and not lora and Path(tokenizer_source).is_dir():
        for name in _TOKENIZER_FILES:
            source = Path(tokenizer_source) / name
            if source.is_file():
                shutil.copy2(source, tmp / "model" / name)
    torch.save(
        {
            "optimizer": optimizer.state_dict(),
            "scheduler": scheduler.state_dict() if scheduler is not None else None,
            "torch_rng": torch.get_rng_state(),
        },
        tmp / "optimizer.pt",
    )
    (tmp / "trainer_state.json").write_text(
        json.dumps({"step": step, "lora": lora, "format_version": FORMAT_VERSION})
    )
    final = checkpoint_dir(root, step)
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    if keep_last is not None:
        for old in list_checkpoints(root)[:-keep_last]:
            if keep_every > 0 and checkpoint_step(old) % keep_every == 0:
                continue
            shutil.rmtree(old)
    return final


def checkpoint_step(path: Path) -> int:
    """The step of a checkpoint directory `step_<N>`."""
    match = _STEP_DIR.match(path.name)
    if match is None:
        raise ValueError(f"{path} is not a checkpoint directory (step_<N>)")
    return int(match.group(1))


def list_checkpoints(root: Path) -> list[Path]:
    """Complete checkpoints under `root`, oldest first."""
    if not root.is_dir():
        return []
    found = []
    for child in root.iterdir():
        match = _STEP_DIR.match(child.name)
        if match and (child / "trainer_state.json").is_file():
            found.append((int(match.group(1)), child))
    return [path for _, path in sorted(found)]


def latest_checkpoint(root: Path) -> Path | None:
    checkpoints = list_checkpoints(root)
    return checkpoints[-1] if checkpoints else None


def read_trainer_state(path: Path) -> dict[str, Any]:
    state = json.loads((path / "trainer_state.json").read_text())
    if state.get("format_version") != FORMAT_VERSION:
        raise ValueError(f"{path}: checkpoint format {state.get('format_version')} != {FORMAT_VERSION}")
    return state


def restore_training_state(path: Path, optimizer: torch.optim.Optimizer, scheduler: Any) -> int:
    """Load optimizer/scheduler/RNG state from a checkpoint; return its step."""
    state = read_trainer_state(path)
    saved = torch.load(path / "optimizer.pt", map_location="cpu", weights_only=False)
    optimizer.load_state_dict(saved["optimizer"])
    if scheduler is not None and saved.get("scheduler") is not None:
        scheduler.load_state_dict(saved["scheduler"])
    torch.set_rng_state(saved["torch_rng"])
    return int(state["step"])
