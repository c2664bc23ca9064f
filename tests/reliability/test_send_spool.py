"""Groups that cannot reach the Atropos API are spooled to disk and delivered later, exactly once.

Against the real atroposlib API server (`run-api`, a child process on a free loopback port): the
API down at start, restarted mid-run, answering 503 (a small proxy in front of the real API, since
a real server won't produce 5xx on demand), refusing a group (422, from the real schema), and a
crash (SIGKILL) in the middle of spooling. Delivery is checked the way a trainer sees it: register
with `/register`, pull `/batch` until it is empty, and count each group's marker token.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from environments.atropos.agentic_opd_env import AgenticOPDEnv
from environments.delivery.send_spool import GroupSpool, SpoolSettings
from hermes_opd.devkit.run_api import RunApi
from hermes_opd.runtime.server_process import free_port

pytestmark = pytest.mark.reliability

GROUP_SIZE = 2


# -- the trainer's side ------------------------------------------------------------------------------
async def register_trainer(url: str) -> None:
    registration = {
        "wandb_group": "test",
        "wandb_project": "test",
        "batch_size": GROUP_SIZE,
        "max_token_len": 4096,
        "checkpoint_dir": "/tmp/unused",
        "save_checkpoint_interval": 0,
        "starting_step": 0,
        "num_steps": 1000,
    }
    async with aiohttp.ClientSession() as session, session.post(f"{url}/register", json=registration) as r:
        assert r.status == 200, await r.text()


async def drain(url: str) -> list[int]:
    """Markers of every group `/batch` hands out, until it has none left."""
    markers: list[int] = []
    async with aiohttp.ClientSession() as session:
        for _ in range(1000):
            async with session.get(f"{url}/batch") as r:
                assert r.status == 200, await r.text()
                body = await r.json()
            assert body.get("status") != "error", body
            if body["batch"] is None:
                return markers
            markers.extend(group["tokens"][0][0] for group in body["batch"])
    raise AssertionError("/batch never ran dry")


def group(marker: int) -> dict:
    return {
        "tokens": [[marker, 5, 6], [marker, 7, 8]],
        "masks": [[-100, 5, 6], [-100, 7, 8]],
        "scores": [1.0, 0.0],
        "inference_logprobs": [[1.0, -0.5, -0.25], [1.0, -1.0, -2.0]],
    }


def make_env(dev_model_dir, spool_dir: Path, api_url: str) -> AgenticOPDEnv:
    config, servers = AgenticOPDEnv.config_init()
    config.tokenizer_name = str(dev_model_dir)
    config.group_size = GROUP_SIZE
    config.rollout_server_url = api_url
    config.use_wandb = False
    config.spool_dir = str(spool_dir)
    servers[0].tokenizer_name = str(dev_model_dir)
    env = AgenticOPDEnv(config, servers)
    env.send_spool.settings = SpoolSettings(
        send_attempts=3, backoff_s=0.02, backoff_max_s=0.1, request_timeout_s=10
    )
    return env


async def send(env: AgenticOPDEnv, marker: int) -> None:
    await env.handle_send_to_api(group(marker))


def assert_exactly_once(markers: list[int], expected: range | list[int]) -> None:
    counts = Counter(markers)
    assert sorted(counts) == sorted(expected), (
        f"missing {set(expected) - set(counts)}, extra {set(counts) - set(expected)}"
    )
    assert all(c == 1 for c in counts.values()), {m: c for m, c in counts.items() if c > 1}


# -- tests ---------------------------------------------------------------------------------------------
async def test_api_down_at_start_groups_are_spooled_then_delivered_once(dev_model_dir, tmp_path):
    port = free_port()
    env = make_env(dev_model_dir, tmp_path / "spool", f"http://127.0.0.1:{port}")
    async with asyncio.timeout(90):
        for marker in range(3):
            await send(env, marker)
        assert env.send_spool.stats.spooled == 3 and env.send_spool.spool.pending_groups() == 3
        segments = env.send_spool.spool.segments()
        assert len(segments) == 3 and all(len(GroupSpool.read(p)) == 1 for p in segments)
        api = RunApi(port=port, log_path=str(tmp_path / "api.log")).start()
        try:
            await register_trainer(api.url)
            await send(env, 3)  # the first send after the API is up drains the spool first
            assert env.send_spool.spool.segments() == []
            assert_exactly_once(await drain(api.url), range(4))
            assert (
                env.send_spool.stats.resent == 4 and env.send_spool.stats.spooled == 4
            )  # 3 while down, 1 queued behind them
        finally:
            api.stop()


async def test_api_restarted_mid_run_loses_nothing_and_is_not_wedged(dev_model_dir, tmp_path):
    port = free_port()
    api = RunApi(port=port, log_path=str(tmp_path / "api.log")).start()
    env = make_env(dev_model_dir, tmp_path / "spool", api.url)
    try:
        async with asyncio.timeout(120):
            await register_trainer(api.url)
            for marker in range(3):
                await send(env, marker)
            assert env.send_spool.stats.sent_direct == 3 and env.send_spool.spool.segments() == []
            delivered = await drain(api.url)  # the trainer pulled these before the restart
            api.stop()
            for marker in range(3, 6):  # API down: spooled
                await send(env, marker)
            assert env.send_spool.spool.pending_groups() == 3
            api.start()
            # Up again but no trainer yet: posting now would wedge atroposlib's /register, so we wait.
            await send(env, 6)
            assert env.send_spool.spool.pending_groups() == 4
            assert "no registered trainer" in (env.send_spool.stats.last_error or "")
            await register_trainer(api.url)
            await send(env, 7)
            assert env.send_spool.spool.segments() == []
            delivered += await drain(api.url)
            assert_exactly_once(delivered, range(8))
    finally:
        api.stop()


async def test_env_registers_again_after_an_api_restart(dev_model_dir, tmp_path):
    """BaseEnv.env_manager calls get_status in a loop; after a restart the API answers 500 to it."""
    api = RunApi(log_path=str(tmp_path / "api.log")).start()
    env = make_env(dev_model_dir, tmp_path / "spool", api.url)
    try:
        async with asyncio.timeout(120):
            await register_trainer(api.url)
            await drain(api.url)  # the trainer's first /batch lets envs register
            await env.register_env()
            await env.get_status()
            api.stop()
            api.start()
            status = asyncio.create_task(env.get_status())
            await asyncio.sleep(1.0)
            assert not status.done()  # waiting for the API to have a trainer again
            await register_trainer(api.url)
            await drain(api.url)
            await status
            assert env.env_id == 0 and "queue_size" in env.status_dict
            await send(env, 1)
            assert_exactly_once(await drain(api.url), [1])
    finally:
        api.stop()


class FlakyProxy:
    """Forwards everything to the real API, but answers 503 to the first `failures` POSTs of groups."""

    def __init__(self, upstream: str, failures: int) -> None:
        self.upstream = upstream
        self.failures = failures
        self.answered_503 = 0
        self.forwarded_posts = 0
        self.url = ""
        self._runner: web.AppRunner | None = None

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        if request.method == "POST" and request.path.startswith("/scored_data"):
            if self.answered_503 < self.failures:
                self.answered_503 += 1
                return web.Response(status=503, text="upstream busy")
            self.forwarded_posts += 1
        headers = {
            k: v for k, v in request.headers.items() if k.lower() in ("content-type", "content-encoding")
        }
        async with (
            aiohttp.ClientSession() as session,
            session.request(request.method, self.upstream + request.path_qs, data=body, headers=headers) as r,
        ):
            return web.Response(status=r.status, body=await r.read(), content_type=r.content_type)

    async def __aenter__(self) -> FlakyProxy:
        app = web.Application(client_max_size=256 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self.handle)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"
        return self

    async def __aexit__(self, *exc) -> None:
        await self._runner.cleanup()


async def test_503_answers_are_retried_then_spooled_then_delivered_once(run_api, dev_model_dir, tmp_path):
    async with asyncio.timeout(60), FlakyProxy(run_api.url, failures=5) as proxy:
        await register_trainer(run_api.url)
        env = make_env(dev_model_dir, tmp_path / "spool", proxy.url)
        await send(env, 0)  # 3 attempts, all 503: spooled
        assert proxy.answered_503 == 3 and env.send_spool.spool.pending_groups() == 1
        await send(env, 1)  # queued behind 0; the flush gets two more 503s, then both go through
        await send(env, 2)  # direct
        assert proxy.answered_503 == 5 and env.send_spool.spool.segments() == []
        stats = env.send_spool.stats
        assert (stats.spooled, stats.resent, stats.sent_direct, stats.send_failures) == (2, 2, 1, 5)
        assert_exactly_once(await drain(run_api.url), range(3))


async def test_transient_503_within_retries_is_not_spooled(run_api, dev_model_dir, tmp_path):
    async with asyncio.timeout(60), FlakyProxy(run_api.url, failures=2) as proxy:
        await register_trainer(run_api.url)
        env = make_env(dev_model_dir, tmp_path / "spool", proxy.url)
        await send(env, 0)
        assert (
            proxy.answered_503 == 2
            and env.send_spool.stats.spooled == 0
            and env.send_spool.stats.sent_direct == 1
        )
        assert_exactly_once(await drain(run_api.url), [0])


async def test_refused_group_goes_to_rejected_and_does_not_block_the_queue(run_api, dev_model_dir, tmp_path):
    async with asyncio.timeout(60):
        await register_trainer(run_api.url)
        env = make_env(dev_model_dir, tmp_path / "spool", run_api.url)
        bad = group(0)
        bad["messages"] = [[{"role": "user"}], [{"role": "user"}]]  # no 'content': the API answers 422
        await env.handle_send_to_api(bad)
        await send(env, 1)
        rejected = sorted((tmp_path / "spool" / "rejected").glob("*.jsonl"))
        assert len(rejected) == 1 and GroupSpool.read(rejected[0])[0]["tokens"][0][0] == 0
        reason = rejected[0].with_name(rejected[0].name + ".reason.txt").read_text()
        assert "422" in reason
        assert env.send_spool.stats.rejected == 1 and env.send_spool.spool.segments() == []
        assert_exactly_once(await drain(run_api.url), [1])


async def test_posting_before_a_trainer_registers_wedges_the_atropos_api(run_api):
    """Why the mixin checks /info first (atroposlib 0.4.0): after an early /scored_data, /register
    skips its initialisation and /batch answers 'Trainer not registered' for good."""
    async with aiohttp.ClientSession() as session:
        async with session.post(f"{run_api.url}/scored_data", json=group(0)) as r:
            assert r.status == 200
        await register_trainer(run_api.url)
        bodies = []
        for _ in range(3):
            async with session.get(f"{run_api.url}/batch") as r:
                bodies.append(await r.json())
    # Depending on the API's history: 'Trainer not registered', or batch None (batch_size stays -1).
    assert all(not body.get("batch") for body in bodies), bodies


CRASH_WRITER = """
import sys
from environments.delivery.send_spool import GroupSpool
spool = GroupSpool(sys.argv[1])
i = 0
while True:
    tokens = [i] + [5] * 2000
    spool.append([{"tokens": [tokens, tokens], "masks": [tokens, tokens], "scores": [1.0, 0.0]}])
    print(i, flush=True)
    i += 1
"""


async def test_crash_while_spooling_leaves_only_complete_segments(run_api, dev_model_dir, tmp_path):
    spool_dir = tmp_path / "spool"
    proc = subprocess.Popen(
        [sys.executable, "-c", CRASH_WRITER, str(spool_dir)],
        stdout=subprocess.PIPE,
        cwd=Path(__file__).resolve().parents[2],
        start_new_session=True,
    )
    acknowledged: list[int] = []
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 60
        while len(acknowledged) < 15 and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            acknowledged.append(int(line))
        time.sleep(0.013)  # land the kill somewhere inside a later append
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
        if proc.stdout is not None:
            acknowledged += [int(x) for x in proc.stdout.read().split()]
    assert len(acknowledged) >= 15, "writer too slow"
    spool = GroupSpool(spool_dir)  # a new process opening the spool: removes half-written temporaries
    assert not list(spool_dir.glob(".*.tmp"))
    on_disk = [GroupSpool.read(p)[0]["tokens"][0][0] for p in spool.segments()]  # every segment parses
    assert on_disk == sorted(on_disk) and set(acknowledged) <= set(on_disk)
    assert len(on_disk) <= len(acknowledged) + 1  # at most the append the kill interrupted after rename

    async with asyncio.timeout(60):
        await register_trainer(run_api.url)
        env = make_env(dev_model_dir, spool_dir, run_api.url)
        assert env.send_spool.stats.recovered_from_previous_run == len(on_disk)
        assert await env.send_spool.flush() == len(on_disk)
        assert_exactly_once(await drain(run_api.url), on_disk)


async def test_two_processes_sharing_a_spool_send_each_group_once(run_api, dev_model_dir, tmp_path):
    spool_dir = tmp_path / "spool"
    writer = GroupSpool(spool_dir)
    for marker in range(12):
        writer.append([group(marker)])
    async with asyncio.timeout(60):
        await register_trainer(run_api.url)
        first = make_env(dev_model_dir, spool_dir, run_api.url)
        second = make_env(dev_model_dir, spool_dir, run_api.url)
        delivered = await asyncio.gather(
            first.send_spool.flush(), second.send_spool.flush(), first.send_spool.flush()
        )
        delivered_total = sum(delivered) + await second.send_spool.flush()
        assert delivered_total == 12
        assert_exactly_once(await drain(run_api.url), range(12))


async def test_spool_files_are_groups_jsonl(tmp_path):
    spool = GroupSpool(tmp_path)
    path = spool.append([group(1), group(2)])
    lines = path.read_text().splitlines()
    assert [json.loads(line)["tokens"][0][0] for line in lines] == [1, 2]
    (tmp_path / "zz-broken.jsonl").write_text('{"tokens": [[1]]}\nnot json\n')
    with pytest.raises(ValueError, match="line 2: not JSON"):
        GroupSpool.read(tmp_path / "zz-broken.jsonl")


def test_only_temporaries_of_dead_writers_are_cleaned_up(tmp_path):
    dead = subprocess.Popen(["true"])
    dead.wait()
    live_tmp = tmp_path / f".{time.time_ns():020d}-{os.getpid()}-000000.jsonl.tmp"
    dead_tmp = tmp_path / f".{time.time_ns():020d}-{dead.pid}-000000.jsonl.tmp"
    live_tmp.write_text("half")
    dead_tmp.write_text("half")
    GroupSpool(tmp_path)  # another process opening a shared spool must not break a write in progress
    assert live_tmp.exists() and not dead_tmp.exists()
