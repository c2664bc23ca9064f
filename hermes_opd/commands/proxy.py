"""`hermes-opd proxy`: serve an OpenAI-compatible endpoint in front of a vLLM policy and turn its
sessions into OPD groups (docs/proxy.md). Thin: flags -> ProxyConfig -> environments/proxy.

Exit codes: 0 stopped by Ctrl-C/SIGTERM, 2 unusable configuration."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from pathlib import Path

from hermes_opd.runtime.cli_flags import add_api_key, add_atropos_url, add_policy_url, api_keys_from
from hermes_opd.runtime.stop_signals import StopSignals

logger = logging.getLogger(__name__)

KEYS_ENV = "HERMES_OPD_PROXY_KEYS"
SERVE_KEYS_ENV = "HERMES_OPD_PROXY_SERVE_KEYS"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hermes-opd proxy", description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", help="YAML file with ProxyConfig fields (flags override it)")
    add_policy_url(parser, help="the vLLM policy server, e.g. http://127.0.0.1:9001/v1")
    parser.add_argument("--policy-model", help="its served model name")
    parser.add_argument("--tokenizer", help="the policy's model directory (tokenizer and chat template)")
    parser.add_argument("--host", help="bind address (default 127.0.0.1; anything wider needs keys)")
    parser.add_argument("--port", type=int, help="default 8100")
    parser.add_argument("--groups", help="groups JSONL to append to (default proxy-groups.jsonl)")
    add_atropos_url(
        parser,
        "--atropos",
        help="send groups to this Atropos API (spooled while it is away) instead of --groups",
    )
    add_api_key(parser, KEYS_ENV, "a client key whose sessions are trained on")
    parser.add_argument("--judge", choices=("rules", "llm"), help="the hint judge's backend")
    parser.add_argument("--lora-prefix", help="serve the newest <prefix>-step<N> adapter (live weights)")
    parser.add_argument("--no-train", action="store_true", help="serve only; never build samples")
    return parser


def config_from(args: argparse.Namespace):
    import yaml

    from environments.proxy.proxy_config import ProxyConfig

    data = yaml.safe_load(Path(args.config).read_text()) if args.config else {}
    flags = {
        "policy_base_url": args.policy_url,
        "policy_model": args.policy_model,
        "tokenizer": args.tokenizer,
        "host": args.host,
        "port": args.port,
        "groups_path": args.groups,
        "policy_lora_prefix": args.lora_prefix,
        "atropos_url": args.atropos_url,
    }
    data.update({k: v for k, v in flags.items() if v is not None})
    if args.no_train:
        data["train"] = False
    if args.judge:
        data.setdefault("opd", {}).setdefault("judge", {})["backend"] = args.judge
    for field, env in (("api_keys", KEYS_ENV), ("serve_only_keys", SERVE_KEYS_ENV)):
        if os.environ.get(env):
            data[field] = [k.strip() for k in os.environ[env].split(",") if k.strip()]
    flag_keys = api_keys_from(args)  # the flags win over the environment variable
    if flag_keys is not None:
        data["api_keys"] = flag_keys
    return ProxyConfig.model_validate(data)


async def serve(config) -> int:
    from environments.proxy.build import build_proxy
    from environments.proxy.server import run_app

    server = await build_proxy(config)
    runner = await run_app(server, config.host, config.port)
    print(
        f"hermes-opd proxy: http://{config.host}:{config.port}/v1 -> {config.policy_base_url} "
        f"({config.model_name}); groups -> {_destination(config)}",
        flush=True,
    )
    stop = asyncio.Event()
    with StopSignals(lambda _sig: stop.set()):  # also during the drain: a second Ctrl-C changes nothing
        await stop.wait()
        logger.info("stopping: scoring queued turns and writing the last groups")
        await server.stop_background()
        await runner.cleanup()
    return 0


def _destination(config) -> str:
    if not config.train:
        return "none (serve only)"
    return f"Atropos API {config.atropos_url}" if config.atropos_url else config.groups_path


def main(argv: list[str] | None = None) -> int:
    from pydantic import ValidationError

    args = build_parser().parse_args(argv)
    try:
        config = config_from(args)
    except (ValidationError, OSError, ValueError) as exc:
        print(
            f"hermes-opd proxy: unusable configuration: {str(exc).splitlines()[0]}"
            + (
                f" ({exc.errors()[0]['loc']}: {exc.errors()[0]['msg']})"
                if isinstance(exc, ValidationError)
                else ""
            ),
            file=sys.stderr,
        )
        return 2
    from hermes_opd.contract.errors import ConfigError

    try:
        return asyncio.run(serve(config))
    except ConfigError as exc:  # refused at start-up, e.g. a groups_path that cannot be written
        print(f"hermes-opd proxy: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
