"""`hermes-opd proxy` under faults: a judge or teacher that is down or slow never fails or delays a
request, and its turns are delivered once when it comes back; a proxy killed and restarted
delivers nothing twice. The policy is the real dev vLLM; a fake server (hermes_opd/bench/
fake_endpoints.py) stands in only for the faults."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys

import pytest
import yaml
from openai import AsyncOpenAI

from hermes_opd.commands.validate import main as validate_main
from hermes_opd.contract.validation import validate_group
from hermes_opd.devkit.fake_endpoints import FakeSettings, FakeVLLM
from tests.support.proxy_factory import (
    ask,
    first_messages,
    next_state,
    proxy_config,
    read_groups,
    running_proxy,
)
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.reliability]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


async def two_turns(client, session: str, **kwargs):
    messages = first_messages(f"task of {session}")
    message, _ = await ask(client, messages, session=session, max_tokens=16, **kwargs)
    return await ask(client, messages + next_state(message), session=session, max_tokens=16, **kwargs)


def samples(path):
    return [(o["proxy"]["session"], o["proxy"]["turn"], o) for g in read_groups(path) for o in g["overrides"]]


async def test_a_teacher_that_fails_then_returns_gets_every_turn_once(dev_server, tmp_path, dev_tokenizer):
    settings = FakeSettings(
        teacher_latency_s=0.0, vocab_size=len(dev_tokenizer), tokenizer_dir=str(dev_server.model_dir)
    )
    async with FakeVLLM(plan=["500"] * 4, model=None, settings=settings) as teacher:
        config = proxy_config(
            dev_server,
            tmp_path,
            retry_backoff_s=0.2,
            samples_per_group=1,
            opd={
                "judge": {"backend": "rules"},
                "teacher": {
                    "base_url": teacher.base_url,
                    "model": "t",
                    "path": "completions",
                    "max_attempts": 1,
                    "check_tokenizer": False,
                },
            },
        )
        async with running_proxy(config) as (url, server):
            await two_turns(AsyncOpenAI(base_url=url, api_key="x"), "flaky")
            await wait_for(lambda: server.feed.stats.groups_written == 1)
            stats = server.feed.stats
    assert (stats.retried, stats.statuses) == (4, {"scored": 1})
    ((session, turn, override),) = samples(tmp_path / "groups.jsonl")
    assert (session, turn, override["proxy"]["attempts"]) == ("flaky", 0, 5)
    assert teacher.requests == ["500"] * 4 + ["ok"]


async def test_a_slow_judge_and_teacher_never_delay_a_request(dev_server, tmp_path, dev_tokenizer):
    settings = FakeSettings(
        judge_latency_s=8.0,
        teacher_latency_s=8.0,
        vocab_size=len(dev_tokenizer),
        tokenizer_dir=str(dev_server.model_dir),
    )
    async with FakeVLLM(model=None, settings=settings) as slow:
        config = proxy_config(
            dev_server,
            tmp_path,
            opd={
                "judge": {"backend": "llm", "base_url": slow.base_url, "model": "j", "m": 1},
                "teacher": {
                    "base_url": slow.base_url,
                    "model": "t",
                    "path": "completions",
                    "check_tokenizer": False,
                },
            },
        )
        async with running_proxy(config) as (url, server):
            client = AsyncOpenAI(base_url=url, api_key="x")
            messages = first_messages()
            for _ in range(3):  # each request is answered while the judge still holds the earlier turns
                message, _ = await ask(client, messages, session="busy", max_tokens=16)
                messages = messages + next_state(message)
                if server.feed.stats.submitted:  # its judge request is on its way (8 s to answer)
                    await wait_for(
                        lambda: slow.stats.judge.in_flight + slow.stats.teacher.in_flight >= 1,
                        timeout_s=4.0,
                        what="no judge or teacher request in flight",
                    )
                    assert server.feed.stats.groups_written == 0
    assert len(samples(tmp_path / "groups.jsonl")) == 2  # delivered after the slow parts answered


async def test_a_judge_that_is_down_then_starts_gets_every_turn_once(dev_server, tmp_path):
    port = free_port()
    config = proxy_config(
        dev_server,
        tmp_path,
        retry_backoff_s=0.2,
        samples_per_group=1,
        opd={
            "judge": {
                "backend": "llm",
                "base_url": f"http://127.0.0.1:{port}/v1",
                "model": "j",
                "m": 1,
                "max_retries": 0,
            },
            "teacher": {"path": "completions"},
        },
    )
    async with running_proxy(config) as (url, server):
        await two_turns(AsyncOpenAI(base_url=url, api_key="x"), "late-judge")
        await wait_for(lambda: server.feed.stats.retried >= 2)
        judge = await FakeVLLM(model=None, settings=FakeSettings(judge_latency_s=0.0)).start(port=port)
        try:
            await wait_for(lambda: server.feed.stats.groups_written == 1)
        finally:
            await judge.stop()
    ((session, turn, override),) = samples(tmp_path / "groups.jsonl")
    assert (session, turn) == ("late-judge", 0) and override["opd"]["turns"][0]["status"] == "scored"


def start_proxy_process(config_path, env) -> tuple[subprocess.Popen, str]:
    process = subprocess.Popen(
        [sys.executable, "-m", "hermes_opd.commands.proxy", "--config", str(config_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    for line in process.stdout:
        if line.startswith("hermes-opd proxy: http://"):
            return process, line.split()[2]
    raise AssertionError(f"the proxy did not start (rc {process.wait()})")


async def test_a_proxy_killed_and_restarted_delivers_nothing_twice(dev_server, tmp_path):
    config = proxy_config(dev_server, tmp_path, port=free_port(), samples_per_group=1).model_dump()
    path = tmp_path / "proxy.yaml"
    path.write_text(yaml.safe_dump(config))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    process, url = start_proxy_process(path, env)
    try:
        client = AsyncOpenAI(base_url=url, api_key="x")
        await asyncio.gather(*(two_turns(client, f"before-{i}") for i in range(3)))
        await wait_for(lambda: len(samples(tmp_path / "groups.jsonl")) == 3)
        # one more turn waits for its next state when the proxy dies: it is lost, never half-written
        await ask(client, first_messages("pending"), session="pending", max_tokens=16)
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
        process, url = start_proxy_process(path, env)
        client = AsyncOpenAI(base_url=url, api_key="x")
        await asyncio.gather(*(two_turns(client, f"after-{i}") for i in range(3)))
        process.send_signal(signal.SIGTERM)  # a clean stop drains the queue and writes the last groups
        assert process.wait(timeout=120) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    found = samples(tmp_path / "groups.jsonl")
    keys = sorted((session, turn) for session, turn, _ in found)
    assert keys == sorted([(f"before-{i}", 0) for i in range(3)] + [(f"after-{i}", 0) for i in range(3)])
    assert all(validate_group(g) == [] for g in read_groups(tmp_path / "groups.jsonl"))
    assert validate_main([str(tmp_path / "groups.jsonl")]) == 0


class SlowAtroposAPI:
    """An Atropos API that takes `delay_s` to accept each group: the fault a real `run-api` cannot
    be made to show. `/info` reports a registered trainer; every accepted group is kept."""

    def __init__(self, delay_s: float) -> None:
        self.delay_s = delay_s
        self.received: list[dict] = []
        self.runner = None
        self.url = ""

    async def __aenter__(self) -> SlowAtroposAPI:
        from aiohttp import web

        async def info(_request):
            return web.json_response({"batch_size": 8, "max_token_len": 4096})

        async def scored(request):
            body = await request.json()
            await asyncio.sleep(self.delay_s)
            self.received.extend(body if isinstance(body, list) else [body])
            return web.json_response({"status": "received"})

        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.add_routes(
            [web.get("/info", info), web.post("/scored_data", scored), web.post("/scored_data_list", scored)]
        )
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        port = free_port()
        await web.TCPSite(self.runner, "127.0.0.1", port).start()
        self.url = f"http://127.0.0.1:{port}"
        return self

    async def __aexit__(self, *exc) -> None:
        await self.runner.cleanup()


async def test_a_slow_atropos_api_never_delays_a_request_and_gets_every_group_once(dev_server, tmp_path):
    delay_s = 6.0
    async with SlowAtroposAPI(delay_s) as api:
        config = proxy_config(
            dev_server, tmp_path, samples_per_group=1, atropos_url=api.url, spool_dir=str(tmp_path / "spool")
        )
        async with running_proxy(config) as (url, server):
            client = AsyncOpenAI(base_url=url, api_key="x")
            latencies = []
            for i in range(4):  # sequential: each request comes while earlier groups are still posting
                started = asyncio.get_running_loop().time()
                await two_turns(client, f"s{i}")
                latencies.append(asyncio.get_running_loop().time() - started)
            assert server.feed.stats.submitted == 4
            assert len(api.received) < 4  # the API was still taking the groups when the last reply came
            # two requests each: answered at the policy's pace, never at the API's
            assert max(latencies) < delay_s, latencies
            await wait_for(lambda: len(api.received) == 4, timeout_s=120)
    keys = sorted((o["proxy"]["session"], o["proxy"]["turn"]) for g in api.received for o in g["overrides"])
    assert keys == [(f"s{i}", 0) for i in range(4)]
