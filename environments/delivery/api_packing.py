"""Which group sizes an Atropos API can always pack into a trainer's batch (pure logic).

atroposlib 0.4.0's `GET /batch` (atroposlib/api/server.py, `get_batch`) hands out only whole groups
that add up exactly to the trainer's `batch_size` (`POST /register`, `GET /info`). Without envs that
set `min_batch_allocation` it uses `grab_exact_from_heterogeneous_queue` (atroposlib/api/utils.py):

1. M = the largest group in the queue;
2. groups of size s are gathered, in queue order, into "packs" of M sequences: a pack is formed
   only when M/s groups of size s have arrived (a size that does not divide M never packs);
3. packs are taken in order until they sum to `batch_size`; if they overshoot (M does not divide
   `batch_size`), or there are not enough, nothing is handed out and the queue stays as it was.

So a queue of uneven groups can hold enough sequences for a batch and still answer `{"batch": null}`
for good: e.g. batch 8 with groups of 4, 3 and 1 (3 never packs, a lone 1 needs three more). Groups
that all have the same size G, with G dividing `batch_size`, always pack: every group is a pack, and
a batch is handed out as soon as `batch_size / G` groups are queued. That is what the proxy sends
(environments/proxy/sample_feed.py, `whole_groups`).
"""

from __future__ import annotations


def batchable_group_size(wanted: int, batch_size: int) -> int:
    """The largest group size <= `wanted` that divides `batch_size` (at least 1)."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, not {batch_size}")
    wanted = max(1, min(wanted, batch_size))
    return next(size for size in range(wanted, 0, -1) if batch_size % size == 0)
