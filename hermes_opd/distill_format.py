"""The distill data contract, version 2 (docs/distill-format.md): pack, convert, validate.

Pure functions, no I/O. The env packs teacher rows with `normalize_row` + `place_turn_rows`,
optionally converts them with `to_dense_k1`, and `validate_group` checks a whole
`ScoredDataGroup` dict against the contract (used by `hermes-opd validate` and by tests).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from hermes_opd.trajectory import MASKED

FORMAT_VERSION = 2
"""Written by `make_opd_block`. 2: a scored turn records `replaced_range` + `replacement_ids` (the
canonical re-encoding around the hint) instead of v1's `hint_token_ids` spliced in as is."""

SUPPORTED_FORMAT_VERSIONS = (1, 2)
"""Versions `validate_group` and the inspector read."""

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
"""`normalize_row` clamps logprobs in (0, 1e-6] to 0.0 (float32 rounding of a near-certain token's
log-softmax); anything larger is a bug upstream and raises."""

TOPK_MASS_TOLERANCE = 1e-4
"""A row's logsumexp (all its entries) may exceed 0 by this much (float32 rounding), no more."""

Rows = tuple[list[list[int]], list[list[float]]]


# ---------------------------------------------------------------------------------------------
# Packing
# ---------------------------------------------------------------------------------------------


def empty_rows(n: int) -> Rows:
    """`n` empty rows for ids and logprobs: no teacher data anywhere."""
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    return [[] for _ in range(n)], [[] for _ in range(n)]


def round_logprobs(values: Sequence[float]) -> list[float]:
    """Round each value to float32 and return the shortest decimal that round-trips it.

    `float(np.float32(x))` alone keeps the float32 value but its float64 repr is long
    (-0.1 -> -0.10000000149011612, about 18.5 characters on average for logprobs). The shortest
    float32 repr (-0.1, at most 9 significant digits, about 9.8 characters on average) parses back
    to the identical float32, and Python's `repr`/`json.dumps` of the parsed float64 prints exactly
    that string. vLLM computes logprobs in float32, so nothing is lost; a K=50 row shrinks by about
    a third in JSON. Cost: about 1 microsecond per value (numpy's Dragon4 formatting), about
    50-100 microseconds per K=50 row. Values beyond float32's range become +-inf; `normalize_row`
    rejects them.
    """
    if len(values) == 0:
        return []
    with np.errstate(over="ignore"):
        as_f32 = np.asarray(values, dtype=np.float64).astype(np.float32)
    return [float(text) for text in as_f32.astype(str).tolist()]


FLOAT32_LOWEST = float(np.finfo(np.float32).min)


def _checked_logprob(value: float, what: str) -> float:
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"{what} is not finite: {value!r}")
    if value < FLOAT32_LOWEST:
        raise ValueError(f"{what} {value!r} is below the float32 range")
    if value > POSITIVE_NOISE_TOLERANCE:
        raise ValueError(f"{what} is positive: {value!r} (a logprob must be <= 0)")
    return min(value, 0.0)


def normalize_row(
    ids: list[int],
    logprobs: list[float],
    student_token: int,
    student_token_logprob: float | None,
    k: int,
) -> tuple[list[int], list[float]]:
    """One contract row from a teacher's candidate tokens at one position.

    - `ids`/`logprobs`: the teacher's candidates in any order (e.g. vLLM's prompt-logprobs dict for
      the position, which may already contain the student's token); ids must be distinct.
    - Sorts by logprob descending (stable: ties keep the input order, i.e. vLLM's rank order) and
      keeps the top `k`.
    - Appends the student token as entry k+1 when it is not among them. Its logprob comes from the
      candidates when present there, else from `student_token_logprob`, which is then required.
      (With fewer than k candidates the row is the teacher's whole list, and the student token is
      inserted in sorted position instead, so such a row is sorted throughout.)
    - Every logprob must be finite and <= 0. Values in (0, 1e-6] are float noise and become 0.0;
      larger ones, NaN and +-inf raise ValueError (a failed row fails the turn, never the group).
    - Each logprob is rounded with `round_logprobs` (float32, shortest repr) before sorting, so the
      stored values are sorted exactly.
    - The row's total mass (top-k plus the student entry: distinct tokens of one distribution) must
      not exceed 1 (logsumexp <= 1e-4), else ValueError: such input is not one log-softmax (logits
      passed by mistake, or a student logprob from another model).
    """
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    if len(ids) != len(logprobs):
        raise ValueError(f"ids and logprobs differ in length: {len(ids)} != {len(logprobs)}")
    if len(set(ids)) != len(ids):
        raise ValueError(f"duplicate token ids in teacher candidates: {sorted(ids)}")
    checked = [
        _checked_logprob(lp, f"teacher logprob of token {tok}") for tok, lp in zip(ids, logprobs, strict=True)
    ]
    rounded = round_logprobs(checked)
    order = sorted(range(len(ids)), key=lambda i: -rounded[i])
    top = order[:k]
    row_ids = [int(ids[i]) for i in top]
    row_lps = [rounded[i] for i in top]
    if student_token not in row_ids:
        if student_token in ids:
            student_lp = rounded[ids.index(student_token)]
        elif student_token_logprob is None:
            raise ValueError(
                f"student token {student_token} is not among the teacher's top-{k} and its logprob was not given"
            )
        else:
            checked_lp = _checked_logprob(student_token_logprob, f"student token {student_token} logprob")
            student_lp = round_logprobs([checked_lp])[0]
        # A full top-k gets the student as entry k+1. Fewer than k candidates means the row is the
        # teacher's whole candidate list, so the student token joins it in sorted position.
        at = len(row_lps)
        if len(row_lps) < k:
            at = next((i for i, lp in enumerate(row_lps) if lp < student_lp), len(row_lps))
        row_ids.insert(at, int(student_token))
        row_lps.insert(at, student_lp)
    peak = max(row_lps)
    row_mass = peak + math.log(sum(math.exp(lp - peak) for lp in row_lps))
    if row_mass > TOPK_MASS_TOLERANCE:
        raise ValueError(
            f"row probability mass exceeds 1 (logsumexp {row_mass:.6g}); not logprobs of one distribution?"
        )
    return row_ids, row_lps


def place_turn_rows(
    ids_rows: list[list[int]],
    lp_rows: list[list[float]],
    start: int,
    turn_ids_rows: Sequence[list[int]],
    turn_lp_rows: Sequence[list[float]],
) -> None:
    """Write one turn's rows, in place, at positions `[start, start + len(turn_ids_rows))`.

    Raises ValueError when the turn does not fit, when its ids/logprob rows differ in shape, or
    when a target position already holds a row (two turns must never overlap).
    """
    if len(ids_rows) != len(lp_rows):
        raise ValueError(f"row lists differ in length: {len(ids_rows)} != {len(lp_rows)}")
    if len(turn_ids_rows) != len(turn_lp_rows):
        raise ValueError(f"turn row lists differ in length: {len(turn_ids_rows)} != {len(turn_lp_rows)}")
    end = start + len(turn_ids_rows)
    if start < 0 or end > len(ids_rows):
        raise ValueError(f"turn rows [{start}, {end}) do not fit a sequence of {len(ids_rows)} positions")
    for j, (row_ids, row_lps) in enumerate(zip(turn_ids_rows, turn_lp_rows, strict=True)):
        if len(row_ids) != len(row_lps):
            raise ValueError(f"position {start + j}: {len(row_ids)} ids but {len(row_lps)} logprobs")
        if ids_rows[start + j] or lp_rows[start + j]:
            raise ValueError(f"position {start + j} already holds a row (overlapping turns?)")
    for j, (row_ids, row_lps) in enumerate(zip(turn_ids_rows, turn_lp_rows, strict=True)):
        ids_rows[start + j] = list(row_ids)
        lp_rows[start + j] = list(row_lps)


def to_dense_k1(
    tokens: Sequence[int],
    masks: Sequence[int],
    inference_logprobs: Sequence[float],
    ids_rows: Sequence[list[int]],
    lp_rows: Sequence[list[float]],
) -> Rows:
    """The `dense_k1` compatibility rows for stock tinker-atropos (docs/distill-format.md, Modes).

    tinker-atropos turns each field into `np.array(rows)` and requires the shape `[n, 1]`, so
    EVERY position gets exactly one entry `[tokens[pos]]`:
    - a position with a teacher row: the teacher's logprob of the student token, taken from it;
    - every other position (unscored generated ones and masked ones alike): `inference_logprobs[pos]`
      copied bit for bit, so tinker's advantage `teacher - student` is exactly 0 there. At masked
      positions that copy is Atropos' 1.0 placeholder, which tinker skips (it tests `lp == 1.0`).
    Raises ValueError on inconsistent lengths, a teacher row at a masked position, or a teacher row
    that lacks the student token.
    """
    n = len(tokens)
    lengths = (len(masks), len(inference_logprobs), len(ids_rows), len(lp_rows))
    if any(length != n for length in lengths):
        raise ValueError(f"lengths differ: tokens={n} masks/inference_logprobs/ids_rows/lp_rows={lengths}")
    dense_ids: list[list[int]] = []
    dense_lps: list[list[float]] = []
    for pos, (token, mask, inference_lp, row_ids, row_lps) in enumerate(
        zip(tokens, masks, inference_logprobs, ids_rows, lp_rows, strict=True)
    ):
        if row_ids:
            if mask == MASKED:
                raise ValueError(f"position {pos} is masked but holds a teacher row")
            try:
                teacher_lp = row_lps[list(row_ids).index(token)]
            except ValueError:
                raise ValueError(f"position {pos}: teacher row lacks the student token {token}") from None
            dense_lps.append([teacher_lp])
        else:
            dense_lps.append([inference_lp])
        dense_ids.append([token])
    return dense_ids, dense_lps


def make_opd_block(
    mode: str,
    k: int,
    turn_spans: Sequence[tuple[int, int] | list[int]],
    turns: Sequence[dict[str, Any]],
) -> dict[str, Any]:
    """The `overrides[seq]["opd"]` provenance block, with the format version filled in."""
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; expected one of {MODES}")
    return {
        "format_version": FORMAT_VERSION,
        "mode": mode,
        "k": k,
        "turn_spans": [[int(s), int(e)] for s, e in turn_spans],
        "turns": [dict(turn) for turn in turns],
    }


# Validation and provenance live in their own modules; re-exported here for callers of the contract.
from hermes_opd.distill_provenance import (  # noqa: E402
    Provenance,
    TurnRecord,
    parse_provenance,
    scored_position_mask,
    scored_positions,
)
from hermes_opd.distill_validation import VIOLATION_KINDS, Violation, validate_group  # noqa: E402

__all__ = [
    "FORMAT_VERSION",
    "MODES",
    "SUPPORTED_FORMAT_VERSIONS",
    "Provenance",
    "TurnRecord",
    "VIOLATION_KINDS",
    "Violation",
    "empty_rows",
    "make_opd_block",
    "normalize_row",
    "parse_provenance",
    "place_turn_rows",
    "round_logprobs",
    "scored_position_mask",
    "scored_positions",
    "to_dense_k1",
    "validate_group",
]
