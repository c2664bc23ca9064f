"""`hermes-opd dev-server`: serve a local model with vLLM on 127.0.0.1 until Ctrl-C."""

from __future__ import annotations

import argparse


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hermes-opd dev-server", description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="model directory (e.g. one built by dev-model build)")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--served-model-name", default="dev-model")
    parser.add_argument("--max-model-len", type=int, default=4096)
    parser.add_argument("--max-logprobs", type=int, default=100)
    parser.add_argument("--log", default=None, help="vLLM log file (default: next to the model dir)")
    parser.add_argument(
        "--no-scale-out",
        action="store_true",
        help="start vLLM without --enable-scale-out (no /inference/v1/generate route)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    from hermes_opd.devkit.dev_server import DevServer, serve_forever

    args = build_parser().parse_args(argv)
    server = DevServer(
        model_dir=args.model,
        served_model_name=args.served_model_name,
        port=args.port,
        max_model_len=args.max_model_len,
        max_logprobs=args.max_logprobs,
        log_path=args.log,
        enable_scale_out=not args.no_scale_out,
    )
    return serve_forever(server)
