"""The learning benches' settings as plain values: defaults < `--quick` < `--config` YAML < flags,
the arms parsed and every size checked. Shared by `hermes-opd bench learning` (bench.py) and
`hermes-opd bench live` (live_bench.py); each turns the values into its own settings."""

from __future__ import annotations

import argparse
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

from hermes_opd.contract.errors import ConfigError


def merged_values(
    args: argparse.Namespace,
    *,
    defaults: dict[str, Any],
    quick: dict[str, Any],
    config_keys: Iterable[str],
    flags: Iterable[str],
    arms: Iterable[str],
    sizes: Iterable[str],
) -> dict[str, Any]:
    """The merged values; `arms` are the known arm names, `sizes` the keys that must be >= 1."""
    config_keys, known_arms = tuple(config_keys), tuple(arms)
    values: dict[str, Any] = {**defaults, **(quick if args.quick else {})}
    if args.config:
        try:
            data = yaml.safe_load(Path(args.config).read_text()) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise ConfigError(f"{args.config}: cannot read the bench config: {exc}") from exc
        unknown = sorted(set(data) - set(config_keys))
        if unknown:
            raise ConfigError(f"{args.config}: unknown keys {unknown}; known: {', '.join(config_keys)}")
        values.update(data)
    for key in flags:
        if getattr(args, key, None) is not None:
            values[key] = getattr(args, key)
    chosen = [a.strip() for a in str(values["arms"]).split(",") if a.strip()]
    if not chosen or any(a not in known_arms for a in chosen):
        raise ConfigError(
            f"arms must be a comma-separated subset of {','.join(known_arms)}, got {values['arms']!r}"
        )
    values["arms"] = chosen
    for key in sizes:
        if int(values[key]) < 1:
            raise ConfigError(f"{key} must be >= 1, got {values[key]}")
    if int(values.get("first_seed") or 0) < 0:
        raise ConfigError(f"first_seed must be >= 0, got {values['first_seed']}")
    return values
