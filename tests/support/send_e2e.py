"""Processes of the collect-then-send path for the end-to-end tests: the sender, a watched reference trainer, digests."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import httpx
import yaml

REPO = Path(__file__).resolve().parents[2]


GROUP_SIZE = 2


def sequence_digest(tokens: list[int]) -> str:
    return hashlib.sha256(json.dumps([int(t) for t in tokens]).encode()).hexdigest()


def file_digests(path: Path) -> Counter[str]:
    records = [json.loads(line) for line in path.read_bytes().splitlines() if line.strip()]
    return Counter(sequence_digest(seq) for record in records for seq in record["tokens"])


class WatchedTrainer:
    """`hermes-opd train` (trainer_adapters.train_cli.main) in a thread; records the digest of every
    sequence its torch trainer takes an optimizer step on, and how many repeats it dropped."""

    def __init__(self, api_url: str, model_dir: str, run_dir: Path, steps: int) -> None:
        self.api_url = api_url
        config = {
            "trainer": "torch",
            "num_steps": steps,
            "atropos": {
                "url": api_url,
                "batch_size": GROUP_SIZE,
                "max_token_len": 4096,
                "poll_initial_s": 0.05,
                "poll_max_s": 0.5,
                "poll_timeout_s": 300,
            },
            "model": {"path": model_dir, "device": "cpu"},
            "optim": {"lr": 1e-5, "micro_batch_size": 2},
            "checkpoint": {"dir": str(run_dir / "ckpt"), "every_steps": 0, "keep_last": 1},
            "logging": {"metrics_path": str(run_dir / "train.jsonl"), "stdout": False},
        }
        self.config_path = run_dir / "trainer.yaml"
        self.config_path.write_text(yaml.safe_dump(config))
        self.trained: Counter[str] = Counter()
        self.dropped = 0
        self.rc: int | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        from trainer_adapters.torch_trainer import TorchTrainer
        from trainer_adapters.train_cli import main as train_main

        original = TorchTrainer.train_step
        watcher = self

        def watched_train_step(trainer, groups):
            for group in groups:
                watcher.trained.update(sequence_digest(seq) for seq in group["tokens"])
            watcher.dropped = trainer.repeats.dropped
            return original(trainer, groups)

        TorchTrainer.train_step = watched_train_step
        try:
            self.rc = train_main(["--config", str(self.config_path), "--log-level", "WARNING"])
        finally:
            TorchTrainer.train_step = original

    def start(self) -> WatchedTrainer:
        self._thread.start()
        deadline = time.monotonic() + 120
        while True:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(self.api_url + "/info", timeout=5).json().get("batch_size") == GROUP_SIZE:
                    return self
            assert time.monotonic() < deadline and self._thread.is_alive(), "the trainer did not register"
            time.sleep(0.1)

    def join(self, timeout_s: float) -> int | None:
        self._thread.join(timeout_s)
        assert not self._thread.is_alive(), "the trainer did not finish"
        return self.rc


def send_argv(path: Path, url: str, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "hermes_opd.commands.main",
        "send",
        str(path),
        "--atropos-url",
        url,
        "--progress",
        "lines",
        *extra,
    ]


def start(argv: list[str], log: Path) -> subprocess.Popen:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
    with log.open("ab") as handle:
        return subprocess.Popen(
            argv,
            cwd=REPO,
            env=env,
            stdout=handle,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )


def kill(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
