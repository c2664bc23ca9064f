"""Names say what they hold: one `isolation.py` (the sandbox's namespaces), and each logger of the
rollout's failure sorting is named after its own module."""

from __future__ import annotations

import logging
from pathlib import Path

from environments.rollout.failed_rollouts import kept_rollouts

ROOT = Path(__file__).resolve().parents[2]


def test_one_isolation_module():
    found = sorted(
        str(p.relative_to(ROOT))
        for package in ("hermes_opd", "environments", "judge", "scoring", "trainer_adapters")
        for p in (ROOT / package).rglob("isolation.py")
    )
    assert found == ["environments/rollout/sandbox/isolation.py"]


def test_a_failed_rollout_is_logged_under_its_module(caplog):
    with caplog.at_level(logging.WARNING, logger="environments.rollout.failed_rollouts"):
        assert kept_rollouts([1, ValueError("boom"), 3], "rollout") == [1, 3]
    assert [r.name for r in caplog.records] == ["environments.rollout.failed_rollouts"]
