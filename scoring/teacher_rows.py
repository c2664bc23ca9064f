"""The teacher's rows in contract form (docs/distill-format.md), pure logic, no I/O.

- `normalize_row`: one position's candidates -> one contract row (top-K sorted by logprob, the
  student's token as entry K+1 when outside, every value checked and rounded to float32's shortest
  decimal).
- `normalize_turn_rows`: the same for all of a turn's positions at once, vectorized with numpy; the
  result is identical, row for row, to `normalize_row` on each position, and so are the errors (any
  row the fast path does not accept goes through `normalize_row`, which words the error).
- `rows_from_topk_arrays`: the same from dense `[n, K]` arrays (the in-process scorer's top-K).
- `place_turn_rows`: a turn's rows written at the turn's own positions of a sequence.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from hermes_opd.contract.constants import POSITIVE_NOISE_TOLERANCE, TOPK_MASS_TOLERANCE
from hermes_opd.contract.rows import FLOAT32_LOWEST, Rows, round_logprobs

try:  # orjson prints float32 arrays as their shortest round-tripping decimals (ryu), ~30x faster
    import orjson
except ImportError:  # pragma: no cover - the numpy path below gives identical values
    orjson = None  # type: ignore[assignment]


def shortest_float32(values: np.ndarray) -> np.ndarray:
    """Each value rounded to float32, then to the float64 of its shortest round-tripping decimal:
    element for element what `round_logprobs` returns, for a whole array at once (finite values)."""
    as_f32 = np.asarray(values, dtype=np.float64).astype(np.float32)
    if orjson is not None:
        return np.asarray(
            orjson.loads(orjson.dumps(as_f32, option=orjson.OPT_SERIALIZE_NUMPY)), dtype=np.float64
        )
    return as_f32.astype(str).astype(np.float64)


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


def normalize_turn_rows(
    cand_ids: Sequence[Sequence[int]], cand_lps: Sequence[Sequence[float]], student_ids: Sequence[int], k: int
) -> Rows:
    """`[normalize_row(cand_ids[j], cand_lps[j], student_ids[j], None, k) for j ...]`, vectorized.

    Same rows, same values, same errors; about 10x less CPU for a K=50 turn."""
    n = len(student_ids)
    if len(cand_ids) != n or len(cand_lps) != n:
        raise ValueError(f"{len(cand_ids)} id rows and {len(cand_lps)} logprob rows for {n} student tokens")
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    if n == 0:
        return [], []
    widths = [len(row) for row in cand_ids]
    width = max(widths)
    if width < k or any(len(row) != w for row, w in zip(cand_lps, widths, strict=True)):
        return _per_row(cand_ids, cand_lps, student_ids, k)
    ids_nw = np.full((n, width), -1, dtype=np.int64)
    lps_nw = np.full((n, width), np.nan, dtype=np.float64)
    for j, (row_ids, row_lps) in enumerate(zip(cand_ids, cand_lps, strict=True)):
        ids_nw[j, : widths[j]] = row_ids
        lps_nw[j, : widths[j]] = row_lps
    valid_nw = np.arange(width)[None, :] < np.asarray(widths)[:, None]
    out = _fast_rows(ids_nw, lps_nw, valid_nw, np.asarray(student_ids, dtype=np.int64), k)
    return out if out is not None else _per_row(cand_ids, cand_lps, student_ids, k)


def rows_from_topk_arrays(
    top_ids_nk: np.ndarray,
    top_lps_nk: np.ndarray,
    student_ids_n: np.ndarray,
    student_lps_n: np.ndarray,
    k: int,
) -> Rows:
    """Contract rows from a teacher's top-K arrays plus its logprob of each student token.

    The candidates of row j are the K entries and, when the student's token is not among them, the
    student's own entry: the same rows `normalize_row` gives for them."""
    top_ids_nk = np.asarray(top_ids_nk, dtype=np.int64)
    top_lps_nk = np.asarray(top_lps_nk, dtype=np.float64)
    student_ids_n = np.asarray(student_ids_n, dtype=np.int64)
    n, width = top_ids_nk.shape
    outside_n = ~(top_ids_nk == student_ids_n[:, None]).any(axis=1)
    ids_nw = np.concatenate([top_ids_nk, np.where(outside_n, student_ids_n, -1)[:, None]], axis=1)
    lps_nw = np.concatenate([top_lps_nk, np.asarray(student_lps_n, dtype=np.float64)[:, None]], axis=1)
    valid_nw = np.ones((n, width + 1), dtype=bool)
    valid_nw[:, width] = outside_n
    out = _fast_rows(ids_nw, lps_nw, valid_nw, student_ids_n, k) if width >= k else None
    if out is not None:
        return out
    cand_ids = [
        [int(t) for t, ok in zip(r, v, strict=True) if ok] for r, v in zip(ids_nw, valid_nw, strict=True)
    ]
    cand_lps = [
        [float(x) for x, ok in zip(r, v, strict=True) if ok] for r, v in zip(lps_nw, valid_nw, strict=True)
    ]
    return _per_row(cand_ids, cand_lps, student_ids_n.tolist(), k)


def _per_row(cand_ids, cand_lps, student_ids, k: int) -> Rows:
    ids_rows: list[list[int]] = []
    lp_rows: list[list[float]] = []
    for row_ids, row_lps, student in zip(cand_ids, cand_lps, student_ids, strict=True):
        out_ids, out_lps = normalize_row(list(row_ids), list(row_lps), int(student), None, k)
        ids_rows.append(out_ids)
        lp_rows.append(out_lps)
    return ids_rows, lp_rows


def _fast_rows(
    ids_nw: np.ndarray, lps_nw: np.ndarray, valid_nw: np.ndarray, student_n: np.ndarray, k: int
) -> Rows | None:
    """The vectorized core; None when any row needs `normalize_row` (an error to word, a short row)."""
    if (valid_nw.sum(axis=1) < k).any():
        return None  # fewer than k candidates: `normalize_row` inserts the student in sorted position
    values = np.where(valid_nw, lps_nw, -1.0)
    with np.errstate(invalid="ignore"):
        bad = ~np.isfinite(values) | (values < FLOAT32_LOWEST) | (values > POSITIVE_NOISE_TOLERANCE)
    if bad.any():
        return None
    masked_ids = np.where(valid_nw, ids_nw, -1 - np.arange(ids_nw.shape[1])[None, :])
    sorted_ids = np.sort(masked_ids, axis=1)
    if (sorted_ids[:, 1:] == sorted_ids[:, :-1]).any():
        return None  # duplicate ids
    clamped = np.minimum(values, 0.0)
    with np.errstate(over="ignore"):
        rounded = shortest_float32(clamped)
    rounded[~valid_nw] = -np.inf
    order = np.argsort(-rounded, axis=1, kind="stable")[:, :k]
    top_ids = np.take_along_axis(ids_nw, order, axis=1)
    top_lps = np.take_along_axis(rounded, order, axis=1)
    outside_n = ~(top_ids == student_n[:, None]).any(axis=1)
    student_lps = np.zeros(len(student_n))
    if outside_n.any():
        where = (ids_nw == student_n[:, None]) & valid_nw
        if (outside_n & ~where.any(axis=1)).any():
            return None  # the student's token is nowhere: `normalize_row` raises
        student_lps = rounded[np.arange(len(student_n)), np.argmax(where, axis=1)]
    peak = top_lps[:, 0]
    mass = np.exp(top_lps - peak[:, None]).sum(axis=1) + np.where(outside_n, np.exp(student_lps - peak), 0.0)
    if (peak + np.log(mass) > TOPK_MASS_TOLERANCE).any():
        return None
    ids_rows = top_ids.tolist()
    lp_rows = top_lps.tolist()
    for j in np.flatnonzero(outside_n).tolist():
        ids_rows[j].append(int(student_n[j]))
        lp_rows[j].append(float(student_lps[j]))
    return ids_rows, lp_rows
