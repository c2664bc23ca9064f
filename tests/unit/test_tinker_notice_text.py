"""The tinker-atropos drop notices are one module with one remedy text
(environments/delivery/tinker_drops.py): the env's and `process`'s once-per-run dense_k1 notice and
`send`'s drop count end in the same `REMEDY`, and no other module words a remedy of its own."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from environments.delivery.tinker_drops import REMEDY, TinkerDropCount, dense_k1_warning
from tests.support.groups import build_group

ROOT = Path(__file__).resolve().parents[2]


def test_both_notices_end_in_the_one_remedy():
    assert f"To keep them, {REMEDY}." in dense_k1_warning(12, [1.0, 1.0])
    count = TinkerDropCount()
    group = build_group(seed=2, group_size=2, k=3)
    group["scores"] = [1.0, 1.0]
    count.add(group)
    assert f"To keep them, {REMEDY}." in (count.warning() or "")


def test_the_remedy_is_written_in_one_place():
    phrase = "stock tinker-atropos takes distill rows only as"
    holders = [
        str(path.relative_to(ROOT))
        for package in ("hermes_opd", "environments", "trainer_adapters")
        for path in (ROOT / package).rglob("*.py")
        if phrase in path.read_text()
    ]
    assert holders == ["environments/delivery/tinker_drops.py"]
    for gone in ("environments.atropos.dense_k1_notice", "hermes_opd.commands.tinker_drops"):
        assert importlib.util.find_spec(gone) is None
