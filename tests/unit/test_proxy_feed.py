"""The proxy's background feed without a pipeline (environments/proxy/sample_feed.py): groups per
policy version with the lag recorded per sample, partial groups after their wait, a full queue that
drops and counts instead of blocking."""

from __future__ import annotations

from environments.pipeline.opd_config import OPDConfig
from environments.proxy.sample_feed import FeedSettings, SampleFeed
from environments.proxy.turn_sample import TurnSample
from hermes_opd.contract.validation import validate_group
from hermes_opd.record.trajectory import Trajectory, TurnSpan
from tests.support.waiting import wait_for


def sample(session: str, turn: int, version: int) -> TurnSample:
    trajectory = Trajectory(
        tokens=[5, 6, 7, 8],
        masks=[-100, -100, 7, 8],
        inference_logprobs=[1.0, 1.0, -0.2, -0.3],
        messages=[{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}],
        turns=[TurnSpan(2, 4, 1)],
    )
    return TurnSample(trajectory, session, turn, f"lora-step{version}", version)


async def test_groups_are_per_policy_version_and_each_sample_records_its_lag():
    written: list[dict] = []

    async def write(group):
        written.append(group)

    newest = {"version": 3}
    feed = SampleFeed(
        None,
        OPDConfig(enabled=False),
        write,
        FeedSettings(samples_per_group=2, group_wait_s=60),
        lambda: newest["version"],
    )
    feed.start()
    for s in (sample("a", 0, 1), sample("b", 0, 2), sample("a", 1, 1)):
        assert feed.submit(s)
    await wait_for(lambda: not feed.pending, 10, "the feed did not write the full group")
    assert [g["group_overrides"]["policy_version"] for g in written] == [1]  # version 2 waits for a partner
    await feed.stop()
    assert [g["group_overrides"]["policy_version"] for g in written] == [1, 2]  # the partial one at the end
    provenance = [[o["proxy"] for o in g["overrides"]] for g in written]
    assert [
        [(p["session"], p["turn"], p["policy_version"], p["policy_lag"]) for p in g] for g in provenance
    ] == [[("a", 0, 1, 2), ("a", 1, 1, 2)], [("b", 0, 2, 1)]]
    assert [g["group_overrides"]["group_size"] for g in written] == [2, 1]
    assert all(validate_group(g) == [] for g in written)


async def test_a_full_queue_drops_and_counts_without_blocking():
    async def write(group):
        return None

    feed = SampleFeed(None, OPDConfig(enabled=False), write, FeedSettings(queue_size=2), lambda: 0)
    results = [feed.submit(sample("s", i, 0)) for i in range(3)]  # no worker runs: the queue fills
    assert results == [True, True, False]
    assert (feed.stats.submitted, feed.stats.dropped_queue_full) == (2, 1)


class RaisingPipeline:
    """A pipeline with a bug: every turn raises (a fault no real server produces on demand)."""

    async def process(self, trajectory, prm_already_effective=False):
        raise RuntimeError("a bug in the pipeline")

    async def aclose(self) -> None:
        return None


async def test_a_turn_whose_pipeline_raises_is_counted_and_the_worker_goes_on():
    async def write(group):
        raise AssertionError("nothing may be written")

    feed = SampleFeed(RaisingPipeline(), OPDConfig(), write, FeedSettings(workers=1), lambda: 0)
    feed.start()
    for turn in range(3):
        assert feed.submit(sample("s", turn, 0))
    await wait_for(lambda: feed.stats.failed == 3, 10, "the worker stopped after the first failure")
    assert feed.pending == 0 and (feed.stats.submitted, feed.stats.retried) == (3, 0)
    await feed.stop()
