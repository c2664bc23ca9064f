"""The learning benches' settings as plain values: defaults < `--quick` < `--config` YAML < flags,
the arms parsed and every size checked. Shared by `hermes-opd bench learning` (bench.py) and
`hermes-opd bench live` (live_bench.py); each turns the values into its own settings."""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

from environments.tasks.conventions import CONVENTION_ENV, Convention
from hermes_opd.contract.errors import ConfigError

LOOP_CONFIG_KEYS = (
    "vllm_url",
    "served_model",
    "student_model",
    "steps",
    "groups_per_step",
    "group_size",
    "eval_every",
    "seeds",
    "first_seed",
    "arms",
    "lora_r",
    "lr",
    "run_timeout_s",
    "env",
    "trainer",
    "convention",
)
"""The `--config` keys both benches read (each adds its own)."""


def add_loop_arguments(
    parser: argparse.ArgumentParser,
    *,
    config_keys: Iterable[str],
    arms: Iterable[str],
    defaults: dict[str, Any],
) -> None:
    """The flags both benches take: the config file, the vLLM to use, the arms, seeds and the run's
    size. `defaults` gives the numbers the help shows."""
    parser.add_argument("--config", help="YAML with any of: " + ", ".join(config_keys))
    parser.add_argument("--vllm-url", help="a running vLLM (root URL) with --enable-lora; default: start one")
    parser.add_argument("--served-model", help="its served model name (default dev-model)")
    parser.add_argument("--arms", help=f"comma-separated subset of {','.join(arms)} (default all)")
    parser.add_argument("--seeds", type=int, help=f"how many seeds (default {defaults['seeds']})")
    parser.add_argument(
        "--first-seed",
        type=int,
        help="the first seed (default 0): more seeds later, in their own --out, then one "
        "--report-only over all the run directories",
    )
    parser.add_argument("--steps", type=int, help=f"optimizer steps per run (default {defaults['steps']})")
    parser.add_argument(
        "--groups-per-step",
        type=int,
        help=f"groups per optimizer step (default {defaults['groups_per_step']})",
    )
    parser.add_argument(
        "--group-size", type=int, help=f"samples per group (default {defaults['group_size']})"
    )
    parser.add_argument(
        "--eval-every",
        type=int,
        help="held-out evaluation of the weights after every k-th step, and the last "
        f"(default {defaults['eval_every']})",
    )
    parser.add_argument("--lr", type=float, help=f"LoRA learning rate (default {defaults['lr']:g})")
    parser.add_argument(
        "--convention",
        help="the team's convention as `verb,module` (e.g. `find,utils`; default the shipped "
        "`compute,helpers`): every process of the run gets HERMES_OPD_CONVENTION "
        "(environments/tasks/conventions.py)",
    )


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
    for key in (*flags, "convention"):
        if getattr(args, key, None) is not None:
            values[key] = getattr(args, key)
    if values.get("convention"):
        try:
            convention = Convention.parse(str(values["convention"]))
        except ValueError as exc:
            raise ConfigError(f"convention: {exc}") from exc
        values["convention"] = f"{convention.verb},{convention.module}"
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


def apply_convention(values: dict[str, Any]) -> None:
    """Set the run's convention for this process and every process it starts (its evaluations, the
    env, the user simulator), when the values name one."""
    if values.get("convention"):
        os.environ[CONVENTION_ENV] = values["convention"]
