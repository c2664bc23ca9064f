"""Start a real `hermes-opd proxy` in the test's event loop, in front of the dev vLLM server."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

from environments.proxy.build import build_proxy
from environments.proxy.proxy_config import ProxyConfig
from environments.proxy.server import run_app

TOOLS = [
    {"type": "function", "function": {"name": "run_python", "description": "Run a Python file.",
     "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}},
    {"type": "function", "function": {"name": "write_file", "description": "Write a file.",
     "parameters": {"type": "object", "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
                    "required": ["path", "content"]}}},
]  # fmt: skip
TRACEBACK = "Traceback (most recent call last):\n  File \"main.py\", line 3, in <module>\n    print(total)\nNameError: name 'total' is not defined\nexit code 1"


def proxy_config(dev_server, tmp_path: Path, **overrides) -> ProxyConfig:
    data = {
        "policy_base_url": dev_server.base_url,
        "policy_model": dev_server.model_name,
        "tokenizer": str(dev_server.model_dir),
        "port": 0,
        "groups_path": str(tmp_path / "groups.jsonl"),
        "samples_per_group": 2,
        "group_wait_s": 0.5,
        "opd": {"judge": {"backend": "rules"}, "teacher": {"path": "completions"}},
    }
    data.update(overrides)
    return ProxyConfig.model_validate(data)


@contextlib.asynccontextmanager
async def running_proxy(config: ProxyConfig, tokenizer=None):
    """Yields (base URL …/v1, the ProxyServer); on exit drains the feed and stops."""
    server = await build_proxy(config, tokenizer)
    runner = await run_app(server, config.host, config.port)
    port = runner.addresses[0][1]
    try:
        yield f"http://127.0.0.1:{port}/v1", server
    finally:
        await server.stop_background(drain_s=120)
        await runner.cleanup()


def read_groups(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
