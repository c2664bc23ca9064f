"""Shared fixtures. The real dev vLLM server is started at most once per session, lazily, only when
an integration test asks for it, and always stopped at the end."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
from pathlib import Path

import pytest

pytest_plugins = ["tests.support.fake_openai", "tests.support.torch_trainer", "tests.support.agent_model"]
"""Fixtures that tests in several folders use: `fake_server` (a fake OpenAI judge server) and
`tiny_model_dir` (a tiny model for the reference torch trainer), and the agent dev model's
`agent_model_dir`, `agent_tokenizer` and `agent_server` (one 64k-context vLLM for the whole session)."""


@pytest.fixture(scope="session")
def dev_model_dir() -> Path:
    """A built dev model (built on first use; reused when already there)."""
    from environments.atropos.embedded_paths import default_dev_model_dir
    from hermes_opd.devkit.dev_model import build_dev_model, is_built

    path = default_dev_model_dir()
    if not is_built(path):
        build_dev_model(path)
    return path


@pytest.fixture(scope="session")
def dev_tokenizer(dev_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(dev_model_dir)


@pytest.fixture(scope="session")
def reference_model(dev_model_dir):
    """The dev model in float32 transformers: the independent oracle for every logprob check."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(dev_model_dir, dtype=torch.float32)
    model.eval()
    return model


@pytest.fixture(scope="session")
def dev_server(dev_model_dir, tmp_path_factory):
    """A real vLLM server on 127.0.0.1 serving the dev model (`.base_url`, `.model_name`).

    Set HERMES_OPD_DEV_SERVER_URL (and optionally HERMES_OPD_DEV_SERVER_MODEL) to reuse a server you
    started yourself with `hermes-opd dev-server`."""
    from hermes_opd.devkit.dev_server import DevServer

    url = os.environ.get("HERMES_OPD_DEV_SERVER_URL")
    if url:
        yield _ExternalServer(url, os.environ.get("HERMES_OPD_DEV_SERVER_MODEL", "dev-model"), dev_model_dir)
        return
    log_path = tmp_path_factory.mktemp("vllm") / "vllm.log"
    server = DevServer(str(dev_model_dir), log_path=str(log_path))
    server.start()
    try:
        yield server
    finally:
        server.stop()


TRUNCATING_GENERATION_CONFIG = {"top_k": 1, "top_p": 0.5, "repetition_penalty": 1.3}
"""What the second dev vLLM's model copy adds to its generation_config.json: vLLM fills any sampling
parameter a request leaves out from it, so a bare request to that server samples greedily."""


@pytest.fixture(scope="session")
def plain_dev_server(dev_model_dir, tmp_path_factory):
    """A second real vLLM for the dev model, started without `--enable-scale-out` (no
    `/inference/v1/generate`), over a copy of the dev model whose generation_config.json truncates
    sampling (TRUNCATING_GENERATION_CONFIG). One server for the tests that need either: the teacher's
    fallback to completions (prompt logprobs are the raw model's, whatever the sampling config) and
    the rollout client's untruncated sampling."""
    import json
    import shutil

    from hermes_opd.devkit.dev_server import DevServer

    work = tmp_path_factory.mktemp("vllm-plain")
    model = work / "dev-model-top-k-1"
    shutil.copytree(dev_model_dir, model)
    config_path = model / "generation_config.json"
    config = json.loads(config_path.read_text())
    config_path.write_text(json.dumps({**config, **TRUNCATING_GENERATION_CONFIG}))
    server = DevServer(str(model), log_path=str(work / "vllm.log"), enable_scale_out=False)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def shared_run_api(tmp_path_factory):
    """atroposlib's `run-api` for the whole session (hermes_opd/devkit/run_api.py); tests take it
    through `run_api`, which empties it first."""
    from hermes_opd.devkit.run_api import RunApi

    api = RunApi(log_path=str(tmp_path_factory.mktemp("run-api") / "api.log"))
    api.start()
    try:
        yield api
    finally:
        api.stop()


@pytest.fixture
def run_api(shared_run_api):
    """The session's `run-api`, emptied for this test (no trainer, no envs, no queue): `.url`.
    A test that stops or restarts its API takes `own_run_api` instead."""
    shared_run_api.reset()
    return shared_run_api


@pytest.fixture
def own_run_api(tmp_path):
    """A fresh `run-api` of this test's own, which it may stop and start again (same port); stopped
    by its PID when the test ends."""
    from hermes_opd.devkit.run_api import RunApi

    api = RunApi(log_path=str(tmp_path / "api.log"))
    api.start()
    try:
        yield api
    finally:
        api.stop()


@pytest.fixture(scope="session")
def qwen3_dev_model_dir() -> Path:
    """The dev model as a Qwen3 (`dev-model build --architecture qwen3`): what the local Tinker-API
    server can load, and what its vLLM serves, so that policy, teacher and trainer are one model."""
    from hermes_opd.devkit.dev_model import build_dev_model, is_built
    from hermes_opd.devkit.paths import default_qwen3_dev_model_dir

    path = default_qwen3_dev_model_dir()
    if not is_built(path, architecture="qwen3"):
        build_dev_model(path, architecture="qwen3")
    return path


@pytest.fixture(scope="session")
def qwen3_dev_server(qwen3_dev_model_dir, tmp_path_factory):
    """A real vLLM server serving the Qwen3 dev model (started only by the `tinker` suite)."""
    from hermes_opd.devkit.dev_server import DevServer

    server = DevServer(
        str(qwen3_dev_model_dir),
        served_model_name="dev-model-qwen3",
        log_path=str(tmp_path_factory.mktemp("vllm-qwen3") / "vllm.log"),
    )
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def tinker_server(qwen3_dev_model_dir, tmp_path_factory):
    """A local Tinker-API server (hermes_opd/devkit/tinker_server.py) training LoRA adapters on the
    Qwen3 dev model; skips when scripts/tinker-server-setup.sh has not built its venv."""
    from hermes_opd.devkit.tinker_server import TinkerServer, tinker_venv_ready

    venv = os.environ.get("HERMES_OPD_TINKER_VENV") or str(
        Path(__file__).resolve().parents[1] / ".venv-tinker"
    )
    if not tinker_venv_ready(venv):
        pytest.skip(f"no Tinker-API server venv at {venv}: run `bash scripts/tinker-server-setup.sh`")
    server = TinkerServer(str(qwen3_dev_model_dir), str(tmp_path_factory.mktemp("tinker-server")), venv=venv)
    server.start()
    try:
        yield server
    finally:
        server.stop()


class _ExternalServer:
    def __init__(self, base_url: str, model_name: str, model_dir: Path) -> None:
        self.base_url = base_url.rstrip("/")
        self.served_model_name = model_name
        self.model_dir = str(model_dir)

    @property
    def model_name(self) -> str:
        return self.served_model_name


@pytest.fixture(autouse=True)
async def close_made():
    """Close what the test registered in tests/support/env_factory.py (its envs, its servers), in its loop."""
    yield
    from tests.support.env_factory import CLOSERS, close_made

    if CLOSERS:
        await close_made()


FOLDER_TIMEOUT_S = {"integration": 900, "reliability": 300, "experiments": 900}
"""Per-test limits (s, set-up included: the first test to ask for the dev vLLM waits for its start)
in the folders that start servers; a unit test gets pyproject's `timeout` (120 s)."""


def pytest_collection_modifyitems(config, items):
    """Give each test in a slow folder that folder's limit, unless it carries its own timeout mark."""
    root = Path(__file__).resolve().parent
    for item in items:
        if item.get_closest_marker("timeout") is not None:
            continue
        parts = Path(item.path).resolve().relative_to(root).parts
        if len(parts) > 1 and parts[0] in FOLDER_TIMEOUT_S:
            item.add_marker(pytest.mark.timeout(FOLDER_TIMEOUT_S[parts[0]]))


_SESSION_STARTED = 0.0


def pytest_sessionstart(session):
    import time

    global _SESSION_STARTED
    _SESSION_STARTED = time.time()


def pytest_sessionfinish(session, exitstatus):
    """The suite leaves no sandbox behind: none of this process's containers on disk or mounted,
    and none of a process it started that died (environments/rollout/sandbox/disk.py). Nor an open
    HTTP session: one would print `Unclosed client session` after the summary."""
    from environments.rollout.sandbox.disk import leftover_containers

    left = leftover_containers(os.getpid(), _SESSION_STARTED)
    if left:
        print(f"\nLEAKED SANDBOXES ({len(left)}): " + ", ".join(map(str, left[:10])))
        session.exitstatus = 1
    open_sessions = unclosed_http_sessions()
    if open_sessions:
        print(f"\nUNCLOSED HTTP SESSIONS ({len(open_sessions)}): " + ", ".join(open_sessions[:10]))
        session.exitstatus = 1


def unclosed_http_sessions() -> list[str]:
    """aiohttp sessions still open, reachable or not. `AgenticOPDEnv.setup()` freezes the heap
    (gc.freeze), which keeps an env that was never closed, and its sessions, until exit."""
    import gc
    import sys

    if "aiohttp" not in sys.modules:
        return []
    from aiohttp import ClientSession

    gc.unfreeze()
    # type(), not isinstance(): isinstance reads __class__, which some lazy torch objects warn about
    return [
        f"ClientSession at {id(o):#x}" for o in gc.get_objects() if type(o) is ClientSession and not o.closed
    ]
