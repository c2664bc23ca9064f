"""Start, health-check and stop a local Tinker-API server: skyrl 0.4.0's "tx" server on its CPU JAX
backend, from the Python 3.12 venv that `scripts/tinker-server-setup.sh` builds (`.venv-tinker`).

The server is two processes: an API process (`skyrl.tinker.api`, FastAPI) and an engine process
(`skyrl.tinker.engine`) that it starts itself, through `uv run`, and that shares its state through a
SQLite database. We start the API the way skyrl expects, `uv run --no-project python -m
skyrl.tinker.api ...` with the venv's own `uv` (a PyPI wheel) and the venv active, so that the
engine comes up from the same venv; the database and the checkpoints go to `workdir` (without
`--database-url` skyrl writes its database inside site-packages). Everything runs in one process
group that `stop()` ends by its leader's PID, the way `DevServer` stops vLLM.

Clients reach it with `tinker.ServiceClient(base_url=server.base_url)` and any `TINKER_API_KEY` that
starts with `tml-` (`client_environment()`). See docs/trainers.md, "A local Tinker-API server".
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from hermes_opd.devkit.dev_server import DevServerError
from hermes_opd.runtime.server_process import ManagedServer, free_port

LOCAL_API_KEY = "tml-hermes-opd-local"
"""The SDK refuses keys that do not start with `tml-`; the local server accepts any such key."""


def default_tinker_venv() -> Path:
    """`$HERMES_OPD_TINKER_VENV`, else `.venv-tinker` in the current directory."""
    return Path(os.environ.get("HERMES_OPD_TINKER_VENV", Path.cwd() / ".venv-tinker"))


def tinker_venv_ready(venv: str | Path) -> bool:
    """True when `venv` was completed by scripts/tinker-server-setup.sh."""
    return (Path(venv) / ".hermes-opd-tinker-installed").is_file() and (Path(venv) / "bin" / "uv").is_file()


def client_environment(base_url: str) -> dict[str, str]:
    """What a tinker SDK client needs to reach the local server (the SDK reads both variables)."""
    return {"TINKER_BASE_URL": base_url, "TINKER_API_KEY": LOCAL_API_KEY}


@dataclass
class TinkerServer(ManagedServer):
    """A Tinker-API server on 127.0.0.1 training LoRA adapters on one local model directory."""

    what = "the Tinker-API server"
    start_error = DevServerError

    model_dir: str
    workdir: str
    venv: str = field(default_factory=lambda: str(default_tinker_venv()))
    port: int = 0
    max_lora_adapters: int = 8
    max_lora_rank: int = 8
    train_micro_batch_size: int = 2
    """Sequences per forward/backward micro-batch in the engine: all 8-12 of a test batch at once
    took the engine past 5 GB and the OOM killer ended it on a 24 GB machine shared six ways."""
    startup_timeout_s: float = 300.0
    process: subprocess.Popen | None = field(default=None, init=False, repr=False)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return Path(self.workdir) / "tinker-server.log"

    @property
    def health_url(self) -> str:
        return f"{self.base_url}/api/v1/healthz"

    def command(self) -> list[str]:
        venv = Path(self.venv).resolve()
        work = Path(self.workdir).resolve()
        backend = {
            "max_lora_adapters": self.max_lora_adapters,
            "max_lora_rank": self.max_lora_rank,
            "train_micro_batch_size": self.train_micro_batch_size,
        }
        return [
            str(venv / "bin" / "uv"),
            "run",
            "--no-project",
            "--offline",
            "--python",
            str(venv / "bin" / "python"),
            "python",
            "-m",
            "skyrl.tinker.api",
            "--base-model",
            str(Path(self.model_dir).resolve()),
            "--backend",
            "jax",
            "--backend-config",
            json.dumps(backend),
            "--database-url",
            f"sqlite:///{work / 'tinker.db'}",
            "--checkpoints-base",
            str(work / "checkpoints"),
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
        ]

    def environment(self) -> dict[str, str]:
        venv = Path(self.venv).resolve()
        env = dict(os.environ)
        env.pop("PYTHONPATH", None)  # the engine must import the venv's packages, not the caller's
        env.update(
            {
                "VIRTUAL_ENV": str(venv),
                "PATH": f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}",
                "UV_PYTHON_DOWNLOADS": "never",
                "UV_NO_CACHE": "1",
                "JAX_PLATFORMS": "cpu",
                "HF_HUB_OFFLINE": "1",
                "TRANSFORMERS_OFFLINE": "1",
            }
        )
        return env

    def start(self) -> TinkerServer:
        if not tinker_venv_ready(self.venv):
            raise DevServerError(
                f"{self.venv} holds no Tinker-API server; run `bash scripts/tinker-server-setup.sh`"
            )
        if not Path(self.model_dir, "config.json").is_file():
            raise DevServerError(f"{self.model_dir} is not a model directory (no config.json)")
        Path(self.workdir).mkdir(parents=True, exist_ok=True)
        if self.port == 0:
            self.port = free_port()
        self._launch(self.command(), self.log_path, env=self.environment(), cwd=self.workdir)
        return self
