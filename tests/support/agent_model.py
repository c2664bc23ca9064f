"""The agent dev model (hermes_opd/devkit/agent_dev_model.py) for tests: built once into the
artefact cache, and served by one session-scoped vLLM with a 64k context.

tests/conftest.py loads this module as a plugin, so any test names `agent_model_dir`,
`agent_tokenizer` or `agent_server` as a fixture and every module shares the one server.

`agent_server` has `.base_url`, `.model_name` and `.model_dir` like the `dev_server` fixture."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

AGENT_MAX_MODEL_LEN = 65536


def agent_model_path() -> Path:
    """The cached agent dev model, built on first use (reused while its builder version holds)."""
    from hermes_opd.devkit.agent_dev_model import build_agent_model, default_agent_model_dir, is_agent_built

    path = default_agent_model_dir()
    if not is_agent_built(path):
        build_agent_model(path)
    return path


@pytest.fixture(scope="session")
def agent_model_dir() -> Path:
    return agent_model_path()


@pytest.fixture(scope="session")
def agent_tokenizer(agent_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(agent_model_dir)


@pytest.fixture(scope="session")
def agent_server(agent_model_dir, tmp_path_factory):
    """A real vLLM serving the agent dev model with `--max-model-len 65536` (the teacher's generate
    path on). HERMES_OPD_AGENT_SERVER_URL reuses a server you started yourself."""
    from hermes_opd.devkit.agent_dev_model import agent_dev_server

    url = os.environ.get("HERMES_OPD_AGENT_SERVER_URL")
    if url:
        from types import SimpleNamespace

        yield SimpleNamespace(
            base_url=url.rstrip("/"),
            model_name="agent-dev-model",
            served_model_name="agent-dev-model",
            model_dir=str(agent_model_dir),
        )
        return
    server = agent_dev_server(
        agent_model_dir, log_path=str(tmp_path_factory.mktemp("vllm-agent") / "vllm.log")
    )
    server.start()
    try:
        yield server
    finally:
        server.stop()
