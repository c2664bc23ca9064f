"""Drop, and count, groups a trainer has already received (pure logic).

`hermes-opd send` stamps each group with a content digest (`hermes_opd.contract.group_id`). The
Atropos API has no idempotency key, so after a crash of the sender (or an API restart, after which
the sender sends again what the API lost) a group may reach the queue twice. A trainer keeps the ids
it has taken and drops a repeat, so no group trains twice. Groups without an id (sent by an env
directly) always pass. The ids live in memory: a restarted trainer starts with none.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from hermes_opd.contract.group_id import group_id_of

logger = logging.getLogger(__name__)


class RepeatedGroupFilter:
    """Remembers the ids of the groups it let through; `dropped` counts the repeats removed."""

    def __init__(self) -> None:
        self.seen: set[str] = set()
        self.dropped = 0

    def new_groups(self, groups: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        """`groups` without those whose id was seen before (in this or an earlier batch)."""
        kept = []
        for group in groups:
            group_id = group_id_of(group)
            if group_id is not None:
                if group_id in self.seen:
                    self.dropped += 1
                    logger.warning(
                        "dropped a repeated group (id %s…): it was already trained on (%d repeats so far)",
                        group_id[:12],
                        self.dropped,
                    )
                    continue
                self.seen.add(group_id)
            kept.append(group)
        return kept
