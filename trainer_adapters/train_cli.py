"""`hermes-opd train --config FILE`: run the trainer a YAML config selects (`trainer: torch|tinker`).

Exit codes: 0 done, 1 training failed (bad batch, API unreachable, no batch in time, weight sync
failed), 2 bad config or arguments, 130 interrupted.
"""

from __future__ import annotations

import argparse
import logging
import sys

from hermes_opd.contract.errors import ConfigError
from hermes_opd.contract.log_setup import configure_logging
from trainer_adapters.trainer_config import TinkerTrainerConfig, TorchTrainerConfig, load_trainer_config

logger = logging.getLogger("hermes_opd.train")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hermes-opd train",
        description="Train a policy from Atropos batches with GRPO + on-policy distillation.",
    )
    parser.add_argument(
        "--config", required=True, help="YAML trainer config (configs/trainer-torch.yaml, ...)"
    )
    parser.add_argument("--num-steps", type=int, help="override num_steps")
    parser.add_argument("--atropos-url", help="override atropos.url")
    parser.add_argument(
        "--log-level", default="INFO", type=str.upper, choices=["DEBUG", "INFO", "WARNING", "ERROR"]
    )
    return parser


def _apply_overrides(
    config: TorchTrainerConfig | TinkerTrainerConfig, args: argparse.Namespace
) -> TorchTrainerConfig | TinkerTrainerConfig:
    data = config.model_dump()
    if args.num_steps is not None:
        data["num_steps"] = args.num_steps
    if args.atropos_url is not None:
        data["atropos"]["url"] = args.atropos_url
    return type(config).model_validate(data)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    configure_logging(args.log_level)
    try:
        config = _apply_overrides(load_trainer_config(args.config), args)
    except (ConfigError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        if isinstance(config, TorchTrainerConfig):
            from trainer_adapters.torch_trainer import TorchTrainer

            final_step = TorchTrainer(config).run()
        else:
            from trainer_adapters.tinker_adapter import run_tinker

            final_step = run_tinker(config)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # the CLI boundary: report, do not dump a traceback on users
        logger.exception("training failed")
        print(f"error: training failed: {exc}", file=sys.stderr)
        return 1
    logger.info("training finished at step %d", final_step)
    return 0


if __name__ == "__main__":
    sys.exit(main())
