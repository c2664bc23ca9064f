"""Start, health-check and stop a real local vLLM server for the dev model (CPU or GPU).

Used by `hermes-opd dev-server`, `hermes-opd demo` and the integration-test fixture. The server
runs in its own process group; `stop()` terminates the whole group and reaps it, so nothing is left
behind even when vLLM has spawned helpers.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from hermes_opd.contract.errors import HermesOPDError
from hermes_opd.runtime.server_process import ManagedServer, free_port
from hermes_opd.runtime.stop_signals import StopSignals

DEFAULT_MAX_LOGPROBS = 100
"""vLLM's default is 20; teacher scoring asks for top-50 prompt logprobs plus the student's token."""

SCALE_OUT_FLAG = "--enable-scale-out"
"""Exposes `POST /inference/v1/generate`, the teacher's `generate` path (docs/scaling.md): the same
prompt-logprob rows as `/v1/completions` without decoded strings, about 3x cheaper per position."""


class DevServerError(HermesOPDError, RuntimeError):
    """The dev server could not be started or did not become healthy."""


@dataclass
class DevServer(ManagedServer):
    """A vLLM OpenAI-compatible server on 127.0.0.1 serving one local model directory."""

    what = "vLLM"
    start_error = DevServerError

    model_dir: str
    served_model_name: str = "dev-model"
    port: int = 0
    max_model_len: int = 4096
    max_logprobs: int = DEFAULT_MAX_LOGPROBS
    kv_cache_gib: int = 1
    enable_scale_out: bool = True
    """Start vLLM with `--enable-scale-out` (the teacher's fast `generate` path)."""
    startup_timeout_s: float = 300.0
    log_path: str | None = None
    extra_args: list[str] = field(default_factory=list)
    on_wait: Callable[[str], None] | None = field(default=None, repr=False)
    """Told what the start waits for, every `WAIT_NOTICE_S` while vLLM is not healthy yet."""
    process: subprocess.Popen | None = field(default=None, init=False, repr=False)

    @property
    def model_name(self) -> str:
        return self.served_model_name

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def root_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        return [
            sys.executable,
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            str(self.model_dir),
            "--served-model-name",
            self.served_model_name,
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--max-model-len",
            str(self.max_model_len),
            "--dtype",
            "float32",
            "--max-logprobs",
            str(self.max_logprobs),
            "--enforce-eager",
            "--distributed-executor-backend",
            "uni",
            "--disable-log-stats",
            *([SCALE_OUT_FLAG] if self.enable_scale_out else []),
            *self.extra_args,
        ]

    def environment(self) -> dict[str, str]:
        env = dict(os.environ)
        env.setdefault("HF_HUB_OFFLINE", "1")
        env.setdefault("TRANSFORMERS_OFFLINE", "1")
        env.setdefault("VLLM_CPU_KVCACHE_SPACE", str(self.kv_cache_gib))
        env.setdefault("VLLM_NO_USAGE_STATS", "1")
        env.setdefault("DO_NOT_TRACK", "1")
        return env

    @property
    def health_url(self) -> str:
        return f"{self.root_url}/health"

    def start(self) -> DevServer:
        if not Path(self.model_dir, "config.json").is_file():
            raise DevServerError(
                f"{self.model_dir} is not a model directory (no config.json); build one with "
                "`hermes-opd dev-model build DIR`"
            )
        if self.port == 0:
            self.port = free_port()
        self.log_path = self.log_path or str(Path(self.model_dir).parent / f"vllm-{self.port}.log")
        self._launch(self.command(), self.log_path, env=self.environment())
        return self

    def _wait_notice(self, waited_s: float) -> None:
        if self.on_wait is not None:
            self.on_wait(
                f"waiting for vLLM to load {Path(self.model_dir).name} and answer /health "
                f"({waited_s:.0f} s; log {self.log_path})"
            )


def serve_forever(server: DevServer) -> int:
    """Run until SIGINT/SIGTERM, then stop the server cleanly. Returns the exit code."""
    stop_requested: list[signal.Signals] = []
    with StopSignals(stop_requested.append):
        try:
            server.start()
            print(
                f"vLLM ready: base_url={server.base_url} model={server.served_model_name} pid={server.process.pid}",
                flush=True,
            )
            while not stop_requested:
                if server.process is None or server.process.poll() is not None:
                    print(f"vLLM exited unexpectedly; last log lines:\n{server.log_tail()}", file=sys.stderr)
                    return 1
                time.sleep(0.5)
            print("stopping vLLM ...", flush=True)
            return 0
        finally:
            server.stop()
