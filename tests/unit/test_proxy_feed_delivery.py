"""The proxy feed delivers every turn once (environments/proxy/sample_feed.py): a group the sink
cannot take stays queued and is written later, in order; at stop the turns not delivered are saved
(environments/proxy/pending_turns.py) and the next start delivers them; with `whole_groups` every
group has one size that divides the trainer's batch (environments/delivery/api_packing.py). The
sinks here are plain callables; the real full disk, teacher and Atropos API are in
tests/reliability/test_proxy_delivery_faults.py."""

from __future__ import annotations

import asyncio
import errno
from types import SimpleNamespace

from environments.pipeline.opd_config import OPDConfig
from environments.proxy import pending_turns
from environments.proxy.sample_feed import FeedSettings, SampleFeed
from environments.proxy.turn_sample import TurnSample
from hermes_opd.record.trajectory import Trajectory, TurnSpan
from tests.support.waiting import wait_for


def sample(session: str, turn: int, version: int = 0) -> TurnSample:
    trajectory = Trajectory(
        tokens=[5, 6, 7, 8],
        masks=[-100, -100, 7, 8],
        inference_logprobs=[1.0, 1.0, -0.2, -0.3],
        messages=[{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}],
        turns=[TurnSpan(2, 4, 1)],
        content_ends={0: 2},
        student_topk={2: ([7, 9], [-0.1, -2.5])},
    )
    return TurnSample(trajectory, session, turn, f"lora-step{version}", version)


def keys(groups):
    return [(o["proxy"]["session"], o["proxy"]["turn"]) for g in groups for o in g["overrides"]]


class DiskFullUntil:
    """A sink that raises ENOSPC (writing nothing) until `room` is set."""

    def __init__(self) -> None:
        self.room = False
        self.written: list[dict] = []
        self.refused = 0

    async def write(self, group):
        if not self.room:
            self.refused += 1
            raise OSError(errno.ENOSPC, "No space left on device")
        self.written.append(group)


async def test_a_group_the_sink_cannot_take_stays_queued_and_is_written_once_later():
    sink = DiskFullUntil()
    feed = SampleFeed(
        None,
        OPDConfig(enabled=False),
        sink.write,
        FeedSettings(samples_per_group=1, retry_backoff_s=0.05, retry_backoff_max_s=0.2),
        lambda: 0,
    )
    feed.start()
    for turn in range(5):
        assert feed.submit(sample("s", turn))
    await wait_for(lambda: feed.stats.groups_waiting == 5 and sink.refused >= 4, 10, "groups not kept")
    assert feed.stats.disk_full and (feed.stats.disk_full_episodes, feed.stats.write_failure_episodes) == (
        1,
        1,
    )
    assert feed.stats.failed == 0 and feed.stats.groups_written == 0
    sink.room = True
    await wait_for(lambda: feed.stats.groups_written == 5, 10, "the kept groups were not written")
    await feed.stop()
    assert keys(sink.written) == [("s", t) for t in range(5)]  # in order, each once
    assert not feed.stats.disk_full and feed.stats.groups_waiting == 0 and feed.stats.lost_at_stop == 0


async def test_groups_still_unwritable_at_stop_are_saved_as_pending_turns(tmp_path):
    sink = DiskFullUntil()
    pending = tmp_path / "pending.jsonl"
    feed = SampleFeed(
        None,
        OPDConfig(enabled=False),
        sink.write,
        FeedSettings(samples_per_group=2, retry_backoff_s=0.05, pending_path=str(pending)),
        lambda: 0,
    )
    feed.start()
    for turn in range(4):
        feed.submit(sample("s", turn))
    await wait_for(lambda: feed.stats.groups_waiting == 2, 10, "groups not kept")
    await feed.stop(drain_s=1)
    assert feed.stats.persisted_at_stop == 4 and feed.stats.lost_at_stop == 0
    saved, bad = pending_turns.load(pending)
    assert bad == 0 and sorted((s.session, s.turn) for s in saved) == [("s", t) for t in range(4)]


class TeacherDown:
    """Every turn comes back `teacher_error` (what the real pipeline reports for a dead teacher)."""

    calls = 0

    async def process(self, trajectory, prm_already_effective=False):
        TeacherDown.calls += 1
        return SimpleNamespace(turns=[SimpleNamespace(status="teacher_error")], prm=None)

    async def aclose(self) -> None:
        return None


async def test_turns_waiting_for_a_retry_are_saved_at_stop_and_delivered_once_after_restart(tmp_path):
    pending = tmp_path / "pending.jsonl"
    settings = FeedSettings(
        samples_per_group=2, group_wait_s=0.2, retry_backoff_s=30, pending_path=str(pending)
    )
    feed = SampleFeed(TeacherDown(), OPDConfig(), lambda g: None, settings, lambda: 0)
    feed.start()
    for turn in range(4):
        feed.submit(sample("down", turn))
    await wait_for(lambda: feed.stats.retried == 4, 10, "the turns were not put back for a retry")
    await feed.stop(drain_s=0.5)
    assert (feed.stats.persisted_at_stop, feed.stats.lost_at_stop, feed.stats.groups_written) == (4, 0, 0)
    saved, _ = pending_turns.load(pending)
    assert sorted(s.turn for s in saved) == [0, 1, 2, 3] and all(s.attempts == 1 for s in saved)
    assert saved[0].trajectory == sample("down", 0).trajectory  # the exact record, reloaded

    written: list[dict] = []

    async def write(group):
        written.append(group)

    again = SampleFeed(None, OPDConfig(enabled=False), write, settings, lambda: 0)
    again.start()
    assert again.stats.reloaded_at_start == 4
    await wait_for(lambda: again.stats.groups_written == 2, 10, "the reloaded turns were not delivered")
    await again.stop()
    assert sorted(keys(written)) == [("down", t) for t in range(4)]
    assert not pending.exists() and again.stats.persisted_at_stop == 0


async def test_whole_groups_have_one_size_that_divides_the_batch_and_old_partials_join_newer_ones(tmp_path):
    written: list[dict] = []

    async def write(group):
        written.append(group)

    async def batch_size():
        return 6  # samples_per_group 4 does not divide 6: groups of 3

    pending = tmp_path / "pending.jsonl"
    settings = FeedSettings(
        samples_per_group=4, group_wait_s=0.1, whole_groups=True, pending_path=str(pending)
    )
    feed = SampleFeed(None, OPDConfig(enabled=False), write, settings, lambda: 2, batch_size=batch_size)
    feed.start()
    for turn in range(4):  # version 1: one group of 3 and one left over
        feed.submit(sample("a", turn, version=1))
    await wait_for(lambda: feed.stats.groups_written == 1, 10, "no whole group")
    await wait_for(lambda: not feed.pending, 10, "not processed")
    for turn in range(2):  # version 2: joins the old leftover once it has waited group_wait_s
        feed.submit(sample("b", turn, version=2))
    await wait_for(lambda: feed.stats.groups_written == 2, 10, "the old partial was stranded")
    feed.submit(sample("c", 0, version=2))  # a partial of the newest version is held, never sent
    await wait_for(lambda: not feed.pending, 10, "not processed")
    await feed.stop()
    assert [len(g["tokens"]) for g in written] == [3, 3]
    assert [g["group_overrides"]["policy_version"] for g in written] == [1, 1]  # the oldest sample's
    assert keys(written) == [("a", 0), ("a", 1), ("a", 2), ("a", 3), ("b", 0), ("b", 1)]
    assert [o["proxy"]["policy_version"] for o in written[1]["overrides"]] == [1, 2, 2]
    saved, _ = pending_turns.load(pending)
    assert [(s.session, s.turn) for s in saved] == [("c", 0)] and feed.stats.persisted_at_stop == 1


async def test_whole_groups_wait_for_a_trainer_before_cutting_any(tmp_path):
    async def write(group):
        raise AssertionError("no group before the batch size is known")

    async def batch_size():
        return None

    settings = FeedSettings(samples_per_group=1, whole_groups=True, pending_path=str(tmp_path / "p.jsonl"))
    feed = SampleFeed(None, OPDConfig(enabled=False), write, settings, lambda: 0, batch_size=batch_size)
    feed.start()
    for turn in range(3):
        feed.submit(sample("s", turn))
    await wait_for(lambda: not feed.pending, 10, "not processed")
    await feed.stop()
    assert (feed.stats.groups_written, feed.stats.persisted_at_stop) == (0, 3)


async def test_without_a_pending_path_what_stop_cannot_deliver_is_counted_lost():
    feed = SampleFeed(TeacherDown(), OPDConfig(), lambda g: None, FeedSettings(retry_backoff_s=30), lambda: 0)
    feed.start()
    feed.submit(sample("s", 0))
    await wait_for(lambda: feed.stats.retried == 1, 10, "no retry")
    await feed.stop(drain_s=0.2)
    assert feed.stats.lost_at_stop == 1


async def test_a_write_under_way_at_stop_is_finished_and_counted_not_also_saved(tmp_path):
    started, written = [], []

    async def slow_write(group):
        started.append(group)
        await asyncio.sleep(0.5)
        written.append(group)

    pending = tmp_path / "pending.jsonl"
    feed = SampleFeed(
        None,
        OPDConfig(enabled=False),
        slow_write,
        FeedSettings(samples_per_group=1, pending_path=str(pending)),
        lambda: 0,
    )
    feed.start()
    feed.submit(sample("s", 0))
    await wait_for(lambda: started, 10, "the write did not start")
    await feed.stop(drain_s=0)  # cancels the worker in the middle of the write
    assert len(written) == 1 and feed.stats.groups_written == 1
    assert feed.stats.persisted_at_stop == 0 and not pending.exists()
