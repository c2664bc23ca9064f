"""The OPD term's KL to the teacher over steps on one fixed batch, through a local Tinker-API server.

Starts the server (hermes_opd/devkit/tinker_server.py, `.venv-tinker`) on the Qwen3 dev model and
runs `tests/support/tinker_client_checks.py train-kl` in the server venv for each reduction and
learning rate given: our trainer, OPD only, on the groups of GROUPS.jsonl (made with that model,
e.g. by the `tinker` suite), the same batch every step. Prints one JSON object per run; stops the
server by its PID. The CPU twin is scripts/tinker_kl_probe.py (docs/trainers.md).

  PYTHONPATH=. .venv/bin/python scripts/tinker_kl_server_probe.py GROUPS.jsonl \\
      --reduction sum per_datum_mean --lr 3e-4 --steps 8
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from hermes_opd.devkit.paths import default_qwen3_dev_model_dir
from hermes_opd.devkit.tinker_server import TinkerServer, client_environment

REPO = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("groups")
    parser.add_argument("--reduction", nargs="+", default=["sum", "per_datum_mean"])
    parser.add_argument("--lr", nargs="+", type=float, default=[3e-4])
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument(
        "--venv", default=os.environ.get("HERMES_OPD_TINKER_VENV", str(REPO / ".venv-tinker"))
    )
    args = parser.parse_args(argv)
    model = str(default_qwen3_dev_model_dir())
    with tempfile.TemporaryDirectory(prefix="tinker-kl-") as work:
        server = TinkerServer(model, work, venv=args.venv).start()
        try:
            env = {**os.environ, **client_environment(server.base_url), "PYTHONUNBUFFERED": "1"}
            env.pop("PYTHONPATH", None)
            for lr in args.lr:
                for reduction in args.reduction:
                    proc = subprocess.run(
                        [
                            str(Path(args.venv) / "bin" / "python"),
                            str(REPO / "tests" / "support" / "tinker_client_checks.py"),
                            "train-kl",
                            str(Path(args.groups).resolve()),
                            "--base-model",
                            model,
                            "--reduction",
                            reduction,
                            "--steps",
                            str(args.steps),
                            "--lr",
                            str(lr),
                        ],
                        cwd=REPO,
                        env=env,
                        capture_output=True,
                        text=True,
                        timeout=1800,
                    )
                    if proc.returncode != 0:
                        print(proc.stdout[-2000:] + proc.stderr[-4000:], file=sys.stderr)
                        return proc.returncode
                    print(json.dumps(json.loads(proc.stdout.strip().splitlines()[-1])), flush=True)
        finally:
            server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
