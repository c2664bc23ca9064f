"""`hermes-opd send`'s pure parts: the group id, the repeated-group filter, the tinker drop count and the
cursor. Against the real Atropos API: tests/reliability/test_send_groups.py."""

from __future__ import annotations

import copy
import hashlib
import json

import pytest

from environments.delivery.send_cursor import SendCursor, load_cursor
from environments.delivery.tinker_drops import TinkerDropCount
from hermes_opd.contract.group_id import GROUP_ID_KEY, group_digest, group_id_of, with_group_id
from tests.support.groups import GROUP_SIZE, build_group
from trainer_adapters.repeated_groups import RepeatedGroupFilter


def test_group_id_is_a_content_digest_that_ignores_transport_fields():
    group = build_group(seed=1, group_size=GROUP_SIZE)
    stamped = with_group_id(group)
    assert group_id_of(group) is None
    assert (
        group_id_of(stamped)
        == group_digest(group)
        == hashlib.sha256(json.dumps(group, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    )
    # what a transport adds does not change it; the id itself is left out of its own digest
    moved = {"group_index": 7, "task_id": "x", **copy.deepcopy(stamped), "env_id": 3}
    assert group_digest(moved) == group_id_of(stamped)
    # any content change does
    changed = copy.deepcopy(group)
    changed["scores"][0] += 1.0
    assert group_digest(changed) != group_digest(group)
    assert "group_overrides" in stamped and GROUP_ID_KEY not in group["group_overrides"]


def test_repeated_group_filter_drops_and_counts_repeats_across_batches():
    a, b, c = (with_group_id(build_group(seed=s, group_size=GROUP_SIZE)) for s in (1, 2, 3))
    unstamped = build_group(seed=4, group_size=GROUP_SIZE)
    repeats = RepeatedGroupFilter()
    assert repeats.new_groups([a, b]) == [a, b]
    assert repeats.new_groups([copy.deepcopy(b), c, unstamped, unstamped]) == [c, unstamped, unstamped]
    assert repeats.new_groups([a]) == []
    assert repeats.dropped == 2


def test_tinker_drop_count_says_how_many_groups_and_positions():
    count = TinkerDropCount()
    topk = build_group(seed=1, group_size=GROUP_SIZE, k=3)  # rows of K+1 = 4 entries
    equal = build_group(seed=2, group_size=GROUP_SIZE, k=3)
    equal["scores"] = [1.0, 1.0]
    for group in (topk, equal):
        count.add(group)
    assert (count.groups, count.dropped_groups, count.topk_wide_groups, count.widest_k) == (2, 2, 2, 4)
    assert count.equal_score_groups == 1
    from hermes_opd.contract.provenance import scored_positions

    positions = sum(int(scored_positions(equal, seq).sum()) for seq in range(GROUP_SIZE))
    assert positions > 0 and count.equal_score_positions == positions
    warning = count.warning()
    assert "would not train on 2 of these 2 groups: 1 group(s) whose scores are all equal" in warning
    assert f"({positions} teacher positions)" in warning and "K up to 4" in warning
    assert "dense_k1" in warning and "hermes-opd train" in warning and "Scores are sent unchanged" in warning
    assert TinkerDropCount().warning() is None


def test_cursor_refuses_a_foreign_file(tmp_path):
    path = tmp_path / "g.jsonl.cursor"
    path.write_text('{"acked_offset": 3}')
    from environments.delivery.send_cursor import CursorError

    with pytest.raises(CursorError, match="not a version 1 cursor"):
        load_cursor(path)
    assert load_cursor(tmp_path / "none.cursor") == SendCursor()
