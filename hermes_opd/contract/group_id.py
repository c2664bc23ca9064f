"""A group's stable id: a digest of its content, carried in `group_overrides` (pure logic).

`hermes-opd send` stamps each group it replays with this id, so that a trainer can recognise a
group it already trained on (the Atropos API has no idempotency key, so a POST whose answer was lost
to a crash may arrive twice). The digest covers what a trainer trains on and nothing the transport
adds: `env_id`, the id itself and the wrapper fields `hermes-opd process` writes (`group_index`,
`task_id`) are left out, so the same group gets the same id however often it is sent.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

GROUP_ID_KEY = "hermes_opd_group_id"
"""The key in `group_overrides` that holds the id."""

_LEFT_OUT = frozenset({"env_id", "group_index", "task_id"})


def group_digest(group: Mapping[str, Any]) -> str:
    """sha256 (hex) of the group's canonical JSON, without the fields a transport adds."""
    content = {key: value for key, value in group.items() if key not in _LEFT_OUT}
    overrides = content.get("group_overrides")
    if isinstance(overrides, Mapping) and GROUP_ID_KEY in overrides:
        content["group_overrides"] = {k: v for k, v in overrides.items() if k != GROUP_ID_KEY}
    data = json.dumps(content, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(data.encode("utf-8")).hexdigest()


def with_group_id(group: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of `group` whose `group_overrides` carries its digest under GROUP_ID_KEY."""
    stamped = dict(group)
    overrides = dict(stamped.get("group_overrides") or {})
    overrides[GROUP_ID_KEY] = group_digest(group)
    stamped["group_overrides"] = overrides
    return stamped


def group_id_of(group: Mapping[str, Any]) -> str | None:
    """The id stamped on `group`, or None when it carries none (e.g. sent by an env directly)."""
    overrides = group.get("group_overrides")
    if isinstance(overrides, Mapping):
        value = overrides.get(GROUP_ID_KEY)
        if isinstance(value, str) and value:
            return value
    return None
