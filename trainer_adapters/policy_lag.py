"""The policy lag of a batch: optimizer steps between the weights that sampled each group and the
weights about to train on it (pure logic; the version key: hermes_opd/contract/policy_version.py)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hermes_opd.contract.policy_version import POLICY_VERSION_KEY


def policy_lag_metrics(groups: Sequence[dict[str, Any]], trainer_step: int) -> dict[str, float]:
    """`policy/lag_mean|min|max` over the groups that record their policy version, and
    `policy/unversioned_groups` for those that do not (an env without `policy_lora_prefix`)."""
    lags = []
    for group in groups:
        version = (group.get("group_overrides") or {}).get(POLICY_VERSION_KEY)
        if isinstance(version, int | float) and not isinstance(version, bool):
            if version > trainer_step:
                raise ValueError(
                    f"a group was sampled by policy version {version}, ahead of the trainer's step "
                    f"{trainer_step}: is another trainer loading adapters with the same prefix?"
                )
            lags.append(trainer_step - int(version))
    metrics = {"policy/unversioned_groups": float(len(groups) - len(lags))}
    if lags:
        metrics.update(
            {
                "policy/lag_mean": sum(lags) / len(lags),
                "policy/lag_min": float(min(lags)),
                "policy/lag_max": float(max(lags)),
            }
        )
    return metrics
