"""The proxy's delivery under faults, with real parts: a full disk (a small tmpfs, mounted by the
test, needs root), a SIGTERM while the teacher is down (a real `hermes-opd proxy` process and the
dev vLLM), and a stock Atropos trainer pulling from a real `run-api` while turns come at an uneven
rate. Every turn is delivered once; nothing half-written; nothing stranded in the API's queue."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import time

import aiohttp
import pytest
import yaml
from openai import AsyncOpenAI

from environments.delivery.send_spool import SpoolSettings
from environments.pipeline.opd_config import OPDConfig
from environments.proxy import pending_turns
from environments.proxy.group_sink import AtroposSink, GroupFileSink, GroupsPathError
from environments.proxy.sample_feed import FeedSettings, SampleFeed
from environments.proxy.turn_sample import TurnSample
from hermes_opd.commands.validate import main as validate_main
from hermes_opd.record.trajectory import Trajectory, TurnSpan
from tests.reliability.test_proxy_faults import free_port, start_proxy_process, two_turns
from tests.support.proxy_factory import proxy_config, read_groups
from tests.support.waiting import wait_for

pytestmark = pytest.mark.reliability


def sample(session: str, turn: int, version: int = 0, length: int = 600) -> TurnSample:
    """A turn of `length` tokens (a line of a few KB, larger than what is left on the full disk)."""
    tokens = [100 + (i % 500) for i in range(length)]
    masks = [-100] * (length - 8) + tokens[-8:]
    logprobs = [1.0] * (length - 8) + [-0.5] * 8
    trajectory = Trajectory(
        tokens=tokens,
        masks=masks,
        inference_logprobs=logprobs,
        messages=[{"role": "user", "content": "q" * 200}, {"role": "assistant", "content": "a"}],
        turns=[TurnSpan(length - 8, length, 1)],
    )
    return TurnSample(trajectory, session, turn, f"lora-step{version}", version)


def keys(groups: list[dict]) -> list[tuple[str, int]]:
    return [(o["proxy"]["session"], o["proxy"]["turn"]) for g in groups for o in g["overrides"]]


@contextlib.contextmanager
def small_disk(path, size: str, *options: str):
    """A tmpfs of `size` at `path` (root only), unmounted at the end."""
    path.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", ",".join(["size=" + size, *options]), "tmpfs", str(path)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def fill(disk, leave_bytes: int):
    """Fill `disk` until about `leave_bytes` are left; returns the filler file."""
    filler = disk / "filler"
    stat = os.statvfs(disk)
    free = stat.f_bavail * stat.f_frsize
    with filler.open("wb") as handle, contextlib.suppress(OSError):
        handle.write(b"\0" * max(0, free - leave_bytes))
    return filler


REGISTRATION = {
    "wandb_group": "t",
    "wandb_project": "t",
    "max_token_len": 4096,
    "checkpoint_dir": "/tmp/unused",
    "save_checkpoint_interval": 0,
    "starting_step": 0,
    "num_steps": 1000,
}


async def register_trainer(url: str, batch_size: int) -> None:
    registration = {**REGISTRATION, "batch_size": batch_size}
    async with aiohttp.ClientSession() as http, http.post(f"{url}/register", json=registration) as resp:
        assert resp.status == 200, await resp.text()


# -- a full disk -------------------------------------------------------------------------------------
async def test_a_full_disk_tears_no_line_and_every_group_is_written_once_when_space_returns(tmp_path):
    turns = 8
    with small_disk(tmp_path / "disk", "512k") as disk:
        path = disk / "groups.jsonl"
        sink = GroupFileSink(path)
        feed = SampleFeed(
            None,
            OPDConfig(enabled=False),
            sink.write,
            FeedSettings(samples_per_group=1, retry_backoff_s=0.05, retry_backoff_max_s=0.2),
            lambda: 0,
        )
        feed.start()
        assert feed.submit(sample("s", 0))
        await wait_for(lambda: feed.stats.groups_written == 1, 20, "the first group was not written")
        filler = fill(disk, leave_bytes=int(path.stat().st_size * 1.5))  # room for one and a half lines
        for turn in range(1, turns):
            assert feed.submit(sample("s", turn))
        await wait_for(
            lambda: feed.stats.disk_full and feed.stats.write_failures >= 3, 20, "the disk never filled"
        )
        written_while_full = feed.stats.groups_written
        assert 0 < written_while_full < turns
        raw = path.read_bytes()
        assert raw.endswith(b"\n") and raw.count(b"\n") == written_while_full  # whole lines only
        filler.unlink()  # space returns
        await wait_for(lambda: feed.stats.groups_written == turns, 20, "the kept groups were not written")
        await feed.stop()
        stats = feed.stats
        assert (stats.disk_full_episodes, stats.write_failure_episodes, stats.failed, stats.lost_at_stop) == (
            1,
            1,
            0,
            0,
        )
        assert keys(read_groups(path)) == [("s", t) for t in range(turns)]  # in order, each once
        assert validate_main([str(path)]) == 0
        assert not list(disk.glob("groups.jsonl.torn-*"))


async def test_a_groups_path_on_a_read_only_disk_is_refused_at_start_up(tmp_path):
    with (
        small_disk(tmp_path / "ro", "64k", "ro") as disk,
        pytest.raises(GroupsPathError, match="cannot be written: Read-only file system"),
    ):
        GroupFileSink(disk / "groups.jsonl")


async def pull_all(url: str) -> list[dict]:
    """Every group GET /batch hands out, until it has none left."""
    groups: list[dict] = []
    async with aiohttp.ClientSession() as http:
        while True:
            async with http.get(f"{url}/batch") as resp:
                batch = (await resp.json()).get("batch")
            if not batch:
                return groups
            groups += batch


async def test_a_spool_on_a_full_disk_while_the_api_is_down_loses_and_doubles_nothing(own_run_api, tmp_path):
    turns = 6
    with small_disk(tmp_path / "disk", "512k") as disk:
        await register_trainer(own_run_api.url, batch_size=2)
        sink = AtroposSink(
            own_run_api.url,
            disk / "spool",
            SpoolSettings(send_attempts=1, backoff_s=0.05, request_timeout_s=5),
        )
        settings = FeedSettings(
            samples_per_group=2, whole_groups=True, retry_backoff_s=0.05, retry_backoff_max_s=0.2
        )
        feed = SampleFeed(
            None,
            OPDConfig(enabled=False),
            sink.write,
            settings,
            lambda: 0,
            flush_sink=sink.flush,
            batch_size=sink.batch_size,
        )
        assert await sink.batch_size() == 2
        own_run_api.stop()  # the API goes away: groups must be spooled, and the disk is full
        filler = fill(disk, leave_bytes=0)
        feed.start()
        for turn in range(turns):
            assert feed.submit(sample(f"s{turn}", 0))
        await wait_for(
            lambda: feed.stats.groups_waiting == turns // 2 and feed.stats.write_failures >= 3,
            30,
            "the groups were not kept while nothing could take them",
        )
        assert feed.stats.disk_full and feed.stats.disk_full_episodes == 1 and feed.stats.groups_written == 0
        filler.unlink()  # space returns: the groups go to the spool
        await wait_for(lambda: feed.stats.groups_written == turns // 2, 30, "the groups were not spooled")
        assert sink.spool.stats.spooled == turns // 2
        assert not list((disk / "spool").glob(".*.tmp"))  # the failed spool writes left nothing behind
        own_run_api.start()  # the API is back (same port), then its trainer
        await register_trainer(own_run_api.url, batch_size=2)
        await wait_for(lambda: sink.spool.stats.resent == turns // 2, 30, "the spool was not resent")
        await feed.stop()
        groups = await pull_all(own_run_api.url)
    assert sorted(keys(groups)) == sorted((f"s{t}", 0) for t in range(turns))  # each once
    assert (feed.stats.failed, feed.stats.lost_at_stop, feed.stats.persisted_at_stop) == (0, 0, 0)


# -- SIGTERM while the teacher is down --------------------------------------------------------------
async def feed_metrics(url: str) -> dict:
    base = url.removesuffix("/v1")
    async with aiohttp.ClientSession() as http, http.get(f"{base}/metrics.json") as resp:
        return (await resp.json())["feed"]


async def test_sigterm_saves_the_turns_waiting_for_a_down_teacher_and_the_next_start_delivers_each_once(
    dev_server, tmp_path
):
    sessions = 4
    dead = free_port()
    down = {
        "judge": {"backend": "rules"},
        "teacher": {
            "base_url": f"http://127.0.0.1:{dead}/v1",
            "model": "t",
            "path": "completions",
            "max_attempts": 1,
            "check_tokenizer": False,
        },
    }
    config = proxy_config(
        dev_server, tmp_path, port=free_port(), samples_per_group=2, retry_backoff_s=5.0, opd=down
    ).model_dump()
    config_path = tmp_path / "proxy.yaml"
    config_path.write_text(yaml.safe_dump(config))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    groups, pending = tmp_path / "groups.jsonl", tmp_path / "groups.jsonl.pending-turns.jsonl"
    process, url = start_proxy_process(config_path, env)
    try:
        client = AsyncOpenAI(base_url=url, api_key="x")
        await asyncio.gather(*(two_turns(client, f"s{i}") for i in range(sessions)))
        metrics: dict = {}

        async def all_waiting() -> bool:
            metrics.update(await feed_metrics(url))
            return (
                metrics["retried"] >= sessions
                and metrics["pending"] == sessions
                and metrics["groups_written"] == 0
            )

        deadline = time.monotonic() + 60
        while not await all_waiting():
            assert time.monotonic() < deadline, metrics
            await asyncio.sleep(0.1)
        process.send_signal(signal.SIGTERM)
        output = process.communicate(timeout=120)[0]
        assert process.returncode == 0, output
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert read_groups(groups) == []
    saved, bad = pending_turns.load(pending)
    assert bad == 0 and sorted((s.session, s.turn) for s in saved) == [(f"s{i}", 0) for i in range(sessions)]
    assert f"{sessions} turn(s) not delivered at stop saved to {pending}" in output

    config["opd"] = {"judge": {"backend": "rules"}, "teacher": {"path": "completions"}}  # the teacher is up
    config_path.write_text(yaml.safe_dump(config))
    process, url = start_proxy_process(config_path, env)
    try:
        await wait_for(
            lambda: len(read_groups(groups)) == sessions // 2, 120, "the saved turns were not delivered"
        )
        process.send_signal(signal.SIGTERM)
        output = process.communicate(timeout=120)[0]
        assert process.returncode == 0, output
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    delivered = read_groups(groups)
    assert sorted(keys(delivered)) == [(f"s{i}", 0) for i in range(sessions)]  # each once
    assert all(o["opd"]["turns"][0]["status"] == "scored" for g in delivered for o in g["overrides"])
    assert not pending.exists() and validate_main([str(groups)]) == 0


# -- a stock trainer at an uneven rate ---------------------------------------------------------------
GAPS_S = [0.05, 0.4, 0.1, 0.9, 0.02, 0.3, 0.6, 0.05, 0.2, 1.1, 0.1, 0.05]
"""Seconds between turns, cycled: bursts and lulls, never a multiple of a group."""


async def stock_trainer(url: str, batch_size: int, want: int, got: list[tuple[float, list[dict]]]) -> None:
    """What any Atropos trainer does: register, then poll GET /batch until `want` sequences came."""
    await register_trainer(url, batch_size)
    async with aiohttp.ClientSession() as http:
        while sum(len(g["tokens"]) for _, batch in got for g in batch) < want:
            async with http.get(f"{url}/batch") as resp:
                batch = (await resp.json()).get("batch")
            if batch:
                got.append((time.monotonic(), batch))
            else:
                await asyncio.sleep(0.05)


async def run_uneven_rate(
    api_url: str,
    spool,
    *,
    turns: int,
    batch_size: int,
    samples_per_group: int,
    whole_groups: bool,
    versions_every: int,
    timeout_s: float,
):
    """Feed `turns` turns at GAPS_S into the proxy's feed and its Atropos sink; a stock trainer
    pulls. Returns (submission times, batches received with their times, the feed's stats)."""
    sink = AtroposSink(api_url, spool)
    settings = FeedSettings(samples_per_group=samples_per_group, group_wait_s=0.5, whole_groups=whole_groups)
    version = {"v": 0}
    feed = SampleFeed(
        None,
        OPDConfig(enabled=False),
        sink.write,
        settings,
        lambda: version["v"],
        flush_sink=sink.flush,
        batch_size=sink.batch_size,
    )
    got: list[tuple[float, list[dict]]] = []
    trainer = asyncio.create_task(stock_trainer(api_url, batch_size, turns, got))
    feed.start()
    submitted: list[float] = []
    for turn in range(turns):
        if turn and turn % versions_every == 0:
            version["v"] += 1  # the trainer published new weights
        feed.submit(sample(f"s{turn}", 0, version["v"], length=64))
        submitted.append(time.monotonic())
        await asyncio.sleep(GAPS_S[turn % len(GAPS_S)])
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(asyncio.shield(trainer), timeout_s)
    trainer.cancel()
    with contextlib.suppress(BaseException):
        await trainer
    await feed.stop(drain_s=5)
    return submitted, got, feed.stats


async def test_a_stock_trainer_gets_every_turn_once_in_whole_batches_at_an_uneven_rate(run_api, tmp_path):
    turns, batch_size = 36, 6  # samples_per_group 4 does not divide 6: the feed sends groups of 3
    submitted, got, stats = await run_uneven_rate(
        run_api.url,
        tmp_path / "spool",
        turns=turns,
        batch_size=batch_size,
        samples_per_group=4,
        whole_groups=True,
        versions_every=7,
        timeout_s=20,
    )
    groups = [g for _, batch in got for g in batch]
    assert {len(g["tokens"]) for g in groups} == {3}
    assert all(sum(len(g["tokens"]) for g in batch) == batch_size for _, batch in got)
    assert sorted(keys(groups)) == sorted((f"s{t}", 0) for t in range(turns))  # every turn trained, once
    # The k-th batch is handed out within one group's wait (group_wait_s 0.5 s, plus the feed's 1 s
    # tick) of the moment its last turn (turn k * batch_size) came.
    waits = [at - submitted[(k + 1) * batch_size - 1] for k, (at, _) in enumerate(got)]
    assert max(waits) < 0.5 + 1.0 + 0.5, waits
    assert stats.persisted_at_stop == 0 and stats.lost_at_stop == 0
