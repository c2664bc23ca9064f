"""The policy lag of a batch: optimizer steps between the weights that sampled each group and the
weights about to train on it, and the bound on it (pure logic; the version key:
hermes_opd/contract/policy_version.py).

`atropos.max_policy_lag` (trainer_adapters/trainer_config.py, default 1) bounds what is trained: a
group sampled more than that many steps before the weights it would train is dropped and counted
(`split_stale`); the env's `max_batches_offpolicy: 1` keeps the queue short enough that this rarely
happens (docs/trainers.md, "Bounded staleness")."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from hermes_opd.contract.policy_version import POLICY_VERSION_KEY


def group_lag(group: dict[str, Any], trainer_step: int) -> int | None:
    """Steps between the group's sampling weights and `trainer_step`; None when the group records
    no policy version (an env without `policy_lora_prefix`)."""
    version = (group.get("group_overrides") or {}).get(POLICY_VERSION_KEY)
    if not isinstance(version, int | float) or isinstance(version, bool):
        return None
    if version > trainer_step:
        raise ValueError(
            f"a group was sampled by policy version {version}, ahead of the trainer's step "
            f"{trainer_step}: is another trainer loading adapters with the same prefix?"
        )
    return trainer_step - int(version)


def split_stale(
    groups: Sequence[dict[str, Any]], trainer_step: int, max_lag: int | None
) -> tuple[list[dict[str, Any]], list[int]]:
    """(the groups to train, the lags of the groups dropped as older than `max_lag`). Unversioned
    groups are kept (their lag is unknown); `max_lag` None keeps everything."""
    kept, dropped = [], []
    for group in groups:
        lag = group_lag(group, trainer_step)
        if max_lag is not None and lag is not None and lag > max_lag:
            dropped.append(lag)
        else:
            kept.append(group)
    return kept, dropped


def policy_lag_metrics(groups: Sequence[dict[str, Any]], trainer_step: int) -> dict[str, float]:
    """`policy/lag_mean|min|max` over the groups that record their policy version, their
    distribution (`policy/lag_<k>_groups`: how many groups had lag k), and
    `policy/unversioned_groups` for those that do not."""
    lags = [lag for lag in (group_lag(g, trainer_step) for g in groups) if lag is not None]
    metrics = {"policy/unversioned_groups": float(len(groups) - len(lags))}
    if lags:
        metrics.update(
            {
                "policy/lag_mean": sum(lags) / len(lags),
                "policy/lag_min": float(min(lags)),
                "policy/lag_max": float(max(lags)),
            }
        )
        metrics.update({f"policy/lag_{k}_groups": float(n) for k, n in sorted(Counter(lags).items())})
    return metrics


def stale_metrics(dropped_lags: Sequence[int], dropped_total: int) -> dict[str, float]:
    """What the bound dropped since the last step (`policy/stale_groups_dropped`, the largest lag
    among them) and over the run (`policy/stale_groups_dropped_total`)."""
    return {
        "policy/stale_groups_dropped": float(len(dropped_lags)),
        "policy/stale_lag_max": float(max(dropped_lags, default=0)),
        "policy/stale_groups_dropped_total": float(dropped_total),
    }
