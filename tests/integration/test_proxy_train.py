"""The proxy's groups train unchanged: a live session through `hermes-opd proxy` (real dev vLLM,
the official openai client), its groups file replayed by `hermes-opd send` into a real `run-api`,
and `hermes-opd train` (the reference torch trainer) takes an optimizer step on every sequence of
the file, once."""

from __future__ import annotations

import asyncio
import json
from collections import Counter

import pytest
from openai import AsyncOpenAI

from hermes_opd.devkit.run_api import RunApi
from hermes_opd.runtime.server_process import free_port
from tests.support.proxy_factory import (
    ask,
    first_messages,
    next_state,
    proxy_config,
    read_groups,
    running_proxy,
)
from tests.support.send_e2e import (
    GROUP_SIZE,
    WatchedTrainer,
    file_digests,
    kill,
    send_argv,
    sequence_digest,
    start,
)
from tests.support.waiting import wait_for

pytestmark = pytest.mark.integration

GROUPS = 2


async def test_the_proxys_groups_train_unchanged(dev_server, tmp_path):
    path = tmp_path / "groups.jsonl"
    config = proxy_config(dev_server, tmp_path, samples_per_group=GROUP_SIZE, group_wait_s=600)
    async with running_proxy(config) as (url, _server):
        client = AsyncOpenAI(base_url=url, api_key="x")
        for session in range(GROUPS):
            messages = first_messages(f"task {session}")
            for turn in range(GROUP_SIZE + 1):  # GROUP_SIZE turns with a next state
                message, _ = await ask(client, messages, session=f"s{session}", seed=turn, max_tokens=24)
                messages = messages + next_state(message)
    groups = read_groups(path)
    assert [len(g["tokens"]) for g in groups] == [GROUP_SIZE] * GROUPS
    api = RunApi(log_path=str(tmp_path / "api.log")).start()
    log = tmp_path / "send.log"
    try:
        trainer = WatchedTrainer(api.url, str(dev_server.model_dir), tmp_path, steps=GROUPS).start()
        proc = start(send_argv(path, api.url), log)
        try:
            assert proc.wait(300) == 0, log.read_text()[-3000:]
        finally:
            kill(proc)
        assert trainer.join(300) == 0
    finally:
        api.stop()
    assert trainer.trained == file_digests(path) and trainer.dropped == 0
    assert f"send complete: {GROUPS} group(s), {GROUPS * GROUP_SIZE} sequences" in log.read_text()


async def test_groups_wait_in_the_spool_while_the_api_is_away_and_train_once(dev_server, tmp_path):
    port = free_port()
    config = proxy_config(
        dev_server,
        tmp_path,
        samples_per_group=GROUP_SIZE,
        group_wait_s=600,
        atropos_url=f"http://127.0.0.1:{port}",
        spool_dir=str(tmp_path / "spool"),
    )
    async with running_proxy(config) as (url, server):
        client = AsyncOpenAI(base_url=url, api_key="x")
        for session in range(GROUPS):
            messages = first_messages(f"task {session}")
            for turn in range(GROUP_SIZE + 1):
                message, _ = await ask(client, messages, session=f"s{session}", seed=turn, max_tokens=24)
                messages = messages + next_state(message)
        await wait_for(lambda: server.feed.stats.groups_written == GROUPS)
        spooled = [
            json.loads(line)
            for p in sorted((tmp_path / "spool").glob("*.jsonl"))
            for line in p.read_text().splitlines()
        ]
        assert len(spooled) == GROUPS  # the API is down: every group waits on disk
        api = RunApi(port=port, log_path=str(tmp_path / "api.log")).start()
        try:
            trainer = WatchedTrainer(api.url, str(dev_server.model_dir), tmp_path, steps=GROUPS).start()
            # the proxy shares this event loop: wait in a thread while the feed's tick resends the spool
            assert await asyncio.to_thread(trainer.join, 300) == 0
        finally:
            api.stop()
    expected = Counter(sequence_digest(seq) for group in spooled for seq in group["tokens"])
    assert trainer.trained == expected and sum(expected.values()) == GROUPS * GROUP_SIZE
    assert list((tmp_path / "spool").glob("*.jsonl")) == []
