"""The distill contract's shared constants: masks, statuses, modes, tolerances and the format
version (docs/distill-format.md). The bottom floor: imports nothing of the project."""

from __future__ import annotations

FORMAT_VERSION = 2
"""Written by `make_opd_block`. 2: a scored turn records `replaced_range` + `replacement_ids` (the
canonical re-encoding around the hint) instead of version 1's `hint_token_ids` spliced in as is."""

SUPPORTED_FORMAT_VERSIONS = (1, 2)
"""Versions the validator and the inspector read."""

MASKED = -100
"""Mask value at positions the policy did not generate."""

MODE_TOPK = "topk"
MODE_DENSE_K1 = "dense_k1"
MODES = (MODE_TOPK, MODE_DENSE_K1)

TURN_STATUSES = (
    "scored",
    "no_hint",
    "no_next_state",
    "no_anchor",
    "judge_error",
    "teacher_error",
    "skipped",
)
NEXT_STATE_ROLES = ("tool", "user")

POSITIVE_NOISE_TOLERANCE = 1e-6
"""Teacher logprobs in (0, 1e-6] are clamped to 0.0 (float32 rounding of a near-certain token's
log-softmax); anything larger is a bug upstream and is refused."""

TOPK_MASS_TOLERANCE = 1e-4
"""A row's logsumexp (all its entries) may exceed 0 by this much (float32 rounding), no more. The one
tolerance of the contract: the env, `hermes-opd validate` and both trainers check with it."""

MAX_GROUP_SEQUENCES = 4096
"""The most sequences one group may hold. A larger "group" is refused as a whole, before any of its
sequences is checked (checking millions of them would take minutes and say nothing more)."""
