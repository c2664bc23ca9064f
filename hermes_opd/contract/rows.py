"""Distill rows (docs/distill-format.md): empty rows, float32 rounding, row normalization and
placement, the `dense_k1` conversion and the provenance block. Pure functions, no I/O."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from hermes_opd.contract.constants import (
    FORMAT_VERSION,
    MASKED,
    MODE_DENSE_K1,
    MODES,
)

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
    50-100 microseconds per K=50 row. Values beyond float32's range become +-inf; `scoring.teacher_rows`
    rejects them.
    """
    if len(values) == 0:
        return []
    with np.errstate(over="ignore"):
        as_f32 = np.asarray(values, dtype=np.float64).astype(np.float32)
    return [float(text) for text in as_f32.astype(str).tolist()]


FLOAT32_LOWEST = float(np.finfo(np.float32).min)


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


def sequence_distill(
    mode: str,
    k: int,
    tokens: Sequence[int],
    masks: Sequence[int],
    inference_logprobs: Sequence[float],
    rows: Rows,
    turn_spans: Sequence[tuple[int, int] | list[int]],
    turns: Sequence[dict[str, Any]],
) -> tuple[list[list[int]], list[list[float]], dict[str, Any]]:
    """A sequence's distill fields as they go on the wire: its rows (converted by `to_dense_k1` in
    `dense_k1` mode) and its `opd` provenance block. The one place both are made, for a sequence
    the pipeline scored and for one it never saw."""
    ids_rows, lp_rows = rows
    if mode == MODE_DENSE_K1:
        ids_rows, lp_rows = to_dense_k1(tokens, masks, inference_logprobs, ids_rows, lp_rows)
    return list(ids_rows), list(lp_rows), make_opd_block(mode, k, turn_spans, turns)
