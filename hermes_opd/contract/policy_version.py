"""Which weights sampled a group: the policy version (docs/notes/learning-lab.md, "The loop").

The trainer's weights after N optimizer steps are version N; the base model is version 0. With LoRA
weight sync (trainer_adapters/weight_sync.py) the trainer loads those weights into vLLM as the
adapter `<prefix>-step<N>`, a new name per step. The env samples each group with the newest such
adapter the server lists and writes N into `group_overrides[POLICY_VERSION_KEY]`; the trainer
logs the lag (its own step minus N) of every batch.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

POLICY_VERSION_KEY = "policy_version"
"""Key in a group's `group_overrides`: the optimizer step whose weights sampled the group."""


def adapter_name(prefix: str, step: int) -> str:
    """The vLLM adapter name of the weights after `step` optimizer steps."""
    if step < 0:
        raise ValueError(f"step must be >= 0, got {step}")
    return f"{prefix}-step{step}"


def adapter_step(prefix: str, name: str) -> int | None:
    """The step of adapter `name` when it is one of `prefix`'s, else None."""
    match = re.fullmatch(re.escape(prefix) + r"-step(\d+)", name)
    return int(match.group(1)) if match else None


def newest_adapter(prefix: str, served: Iterable[str]) -> tuple[str, int] | None:
    """The served adapter of `prefix` with the highest step, as (name, step); None when none is."""
    found = [(step, name) for name in served if (step := adapter_step(prefix, name)) is not None]
    if not found:
        return None
    step, name = max(found)
    return name, step


def stamp_policy_version(group: dict, version: int | None) -> None:
    """Write `version` into a built group's `group_overrides` (both producers stamp it here, after
    building the group); None (no adapter followed) leaves the group as it is."""
    if version is not None:
        group.setdefault("group_overrides", {})[POLICY_VERSION_KEY] = version
