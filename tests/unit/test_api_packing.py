"""Group sizes atroposlib's `GET /batch` can always pack (environments/delivery/api_packing.py),
checked against atroposlib's own packing function."""

from __future__ import annotations

from atroposlib.api.utils import grab_exact_from_heterogeneous_queue

from environments.delivery.api_packing import batchable_group_size


def group(size: int) -> dict:
    return {"tokens": [[1]] * size}


def test_uneven_groups_can_hold_a_batch_that_is_never_handed_out():
    batch, _ = grab_exact_from_heterogeneous_queue([group(4), group(3), group(1), group(2)], 8)
    assert batch is None  # 10 sequences queued, batch 8: nothing, for good


def test_the_size_divides_the_batch_and_is_at_most_the_wanted_size():
    assert [batchable_group_size(4, b) for b in (8, 6, 5, 2, 1)] == [4, 3, 1, 2, 1]
    assert batchable_group_size(16, 12) == 12 and batchable_group_size(7, 12) == 6


def test_groups_of_the_chosen_size_always_pack_as_soon_as_a_batch_is_queued():
    for batch_size in range(1, 33):
        for wanted in range(1, 17):
            size = batchable_group_size(wanted, batch_size)
            queue = [group(size) for _ in range(batch_size // size)]
            batch, rest = grab_exact_from_heterogeneous_queue(queue + [group(size)], batch_size)
            assert batch is not None and sum(len(g["tokens"]) for g in batch) == batch_size
            assert len(rest) == 1
            assert grab_exact_from_heterogeneous_queue(queue[:-1], batch_size)[0] is None  # one short: wait
