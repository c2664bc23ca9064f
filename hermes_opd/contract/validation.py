"""Validate a `ScoredDataGroup` against the distill contract (docs/distill-format.md): shapes,
finiteness, sort order, the student token, spans and provenance. Pure functions, numpy-vectorised."""

from __future__ import annotations

from dataclasses import dataclass
from itertools import chain
from typing import Any

import numpy as np

from hermes_opd.contract.constants import MASKED, MODE_DENSE_K1, TOPK_MASS_TOLERANCE
from hermes_opd.contract.process_reward import PRM_KEY, prm_problems
from hermes_opd.contract.provenance import Provenance, parse_provenance, scored_position_mask
from hermes_opd.contract.student_topk import STUDENT_TOPK_KEY, student_topk_problems

SHAPE = "shape"
NON_FINITE = "non_finite"
POSITIVE_LOGPROB = "positive_logprob"
UNSORTED = "unsorted"
TOPK_MASS = "topk_mass"
STUDENT_TOKEN_MISSING = "student_token_missing"
DUPLICATE_ID = "duplicate_id"
ROW_AT_MASKED_POSITION = "row_at_masked_position"
UNPROVENANCED_ROW = "unprovenanced_row"
MISSING_ROW = "missing_row"
SPAN_OUTSIDE_GENERATED = "span_outside_generated"
PROVENANCE = "provenance"
ZERO_PADDING = "zero_padding"
DENSE_K1_MISMATCH = "dense_k1_mismatch"
STUDENT_TOPK = "student_topk"
PROCESS_REWARD = "process_reward"

VIOLATION_KINDS = (
    SHAPE,
    NON_FINITE,
    POSITIVE_LOGPROB,
    UNSORTED,
    TOPK_MASS,
    STUDENT_TOKEN_MISSING,
    DUPLICATE_ID,
    ROW_AT_MASKED_POSITION,
    UNPROVENANCED_ROW,
    MISSING_ROW,
    SPAN_OUTSIDE_GENERATED,
    PROVENANCE,
    ZERO_PADDING,
    DENSE_K1_MISMATCH,
    STUDENT_TOPK,
    PROCESS_REWARD,
)

GROUP_FIELDS = ("tokens", "masks", "scores", "inference_logprobs", "distill_token_ids", "distill_logprobs")
OPTIONAL_WITHOUT_PROVENANCE = ("inference_logprobs", "distill_token_ids", "distill_logprobs")
"""Fields a group from another env may lack when provenance is not required (trainers)."""


@dataclass(frozen=True)
class Violation:
    """One way a group breaks the contract. `seq`/`pos` are None when the problem is not local."""

    kind: str
    group: int
    seq: int | None
    pos: int | None
    message: str
    line: int | None = None
    """1-based line of the JSONL file, when the group came from one."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "group": self.group,
            "line": self.line,
            "seq": self.seq,
            "pos": self.pos,
            "message": self.message,
        }


class _Collector:
    def __init__(self, group_index: int) -> None:
        self.group_index = group_index
        self.violations: list[Violation] = []

    def add(self, kind: str, seq: int | None, pos: int | None, message: str) -> None:
        self.violations.append(Violation(kind, self.group_index, seq, pos, message))

    def add_rows(self, kind: str, seq: int, positions: np.ndarray, describe) -> None:
        for pos in positions.tolist():
            self.add(kind, seq, pos, describe(pos))


def validate_group(
    group: dict[str, Any], group_index: int = 0, *, require_provenance: bool = True
) -> list[Violation]:
    """Every contract violation of one ScoredDataGroup dict, sorted by (seq, pos).

    `require_provenance=False` is for trainers, which also take groups from other envs: provenance is
    not policed (a missing or incomplete `overrides[seq]["opd"]` block is no violation), groups
    without `inference_logprobs` or distill fields are accepted, and every row that is present gets
    the same row checks (shape, finiteness, sort order, mass, the student token) with the same
    tolerance. A sequence whose opd block is complete is read through it (its mode, K and scored
    turns), as in strict mode; otherwise its rows are checked as `topk` rows with K unknown.
    """
    out = _Collector(group_index)
    if not isinstance(group, dict):
        out.add(SHAPE, None, None, f"group is a {type(group).__name__}, not an object")
        return out.violations
    tokens = group.get("tokens")
    if not isinstance(tokens, list):
        out.add(SHAPE, None, None, "field 'tokens' is missing or not a list")
        return out.violations
    n_seqs = len(tokens)
    present: dict[str, list[Any]] = {}
    for name in GROUP_FIELDS[1:]:
        value = group.get(name)
        if value is None and not require_provenance and name in OPTIONAL_WITHOUT_PROVENANCE:
            continue
        if not isinstance(value, list):
            out.add(SHAPE, None, None, f"field {name!r} is missing or not a list")
        elif len(value) != n_seqs:
            out.add(SHAPE, None, None, f"field {name!r} has {len(value)} sequences, tokens has {n_seqs}")
        else:
            present[name] = value
    overrides = group.get("overrides")
    overrides_ok = isinstance(overrides, list) and len(overrides) == n_seqs
    if not overrides_ok and (require_provenance or overrides is not None):
        out.add(
            PROVENANCE, None, None, f"overrides must be a list of {n_seqs} objects, got {overrides!r:.80}"
        )
    for seq in range(n_seqs):
        override = overrides[seq] if overrides_ok else None
        opd = override.get("opd") if isinstance(override, dict) else None
        provenance = parse_provenance(opd)
        known = require_provenance or (isinstance(opd, dict) and not provenance.problems)
        if overrides_ok and require_provenance:
            for problem in provenance.problems:
                out.add(PROVENANCE, seq, None, problem)
        _validate_sequence(
            out,
            seq,
            {name: value[seq] for name, value in present.items()},
            tokens[seq],
            provenance if known else None,
        )
        if isinstance(override, dict) and STUDENT_TOPK_KEY in override:
            _check_student_topk(out, seq, override[STUDENT_TOPK_KEY], tokens[seq], group)
        _check_process_reward(out, seq, override, tokens[seq], group, require_provenance)
    out.violations.sort(key=lambda v: (-1 if v.seq is None else v.seq, -1 if v.pos is None else v.pos))
    return out.violations


def _check_student_topk(
    out: _Collector, seq: int, block: Any, raw_tokens: Any, group: dict[str, Any]
) -> None:
    """The student's sampling-time top-K rows (hermes_opd/contract/student_topk.py), when present."""
    tokens = _int_array(raw_tokens)
    if tokens is None:
        return
    masks = _int_array((group.get("masks") or [None] * (seq + 1))[seq])
    generated = (
        masks != MASKED if masks is not None and len(masks) == len(tokens) else np.ones(len(tokens), bool)
    )
    inference = _float_array((group.get("inference_logprobs") or [None] * (seq + 1))[seq])
    if inference is not None and len(inference) != len(tokens):
        inference = None
    for pos, message in student_topk_problems(block, tokens.tolist(), generated.tolist(), inference):
        out.add(STUDENT_TOPK, seq, pos, message)


def _check_process_reward(
    out: _Collector, seq: int, override: Any, raw_tokens: Any, group: dict[str, Any], strict: bool
) -> None:
    """The per-turn process reward (hermes_opd/contract/process_reward.py): a sequence with a PRM
    block must carry exactly its `advantages`. In strict mode (our env's own output) `advantages`
    without a PRM block is a violation too: nothing else of ours writes them."""
    block = override.get(PRM_KEY) if isinstance(override, dict) else None
    advantages = group.get("advantages")
    seq_advantages = advantages[seq] if isinstance(advantages, list) and len(advantages) > seq else None
    if block is None:
        if strict and seq_advantages is not None:
            out.add(
                PROCESS_REWARD, seq, None, "advantages without overrides[seq]['prm'] saying what they carry"
            )
        return
    tokens = _int_array(raw_tokens)
    if tokens is None:
        return
    masks = _int_array((group.get("masks") or [None] * (seq + 1))[seq])
    generated = (
        masks != MASKED if masks is not None and len(masks) == len(tokens) else np.ones(len(tokens), bool)
    )
    opd = override.get("opd")
    spans = override.get("turn_spans", opd.get("turn_spans") if isinstance(opd, dict) else None)
    for pos, message in prm_problems(block, seq_advantages, len(tokens), generated.tolist(), spans):
        out.add(PROCESS_REWARD, seq, pos, message)


def _numeric_array(values: Any, dtype: type, kinds: str) -> np.ndarray | None:
    """`values` as a 1-D array of `dtype`, or None unless it is a list whose numpy kind is in `kinds`."""
    if not isinstance(values, list):
        return None
    if not values:
        return np.zeros(0, dtype=dtype)
    try:
        array = np.asarray(values)
    except (ValueError, OverflowError):
        return None
    if array.ndim != 1 or array.dtype.kind not in kinds:
        return None
    return array.astype(dtype, copy=False)


def _int_array(values: Any) -> np.ndarray | None:
    """`values` as int64 [len], or None unless it is a list of integers."""
    return _numeric_array(values, np.int64, "iu")


def _float_array(values: Any) -> np.ndarray | None:
    """`values` as float64 [len], or None unless it is a list of numbers (JSON NaN/Infinity included)."""
    return _numeric_array(values, np.float64, "iuf")


def _validate_sequence(
    out: _Collector, seq: int, fields: dict[str, Any], raw_tokens: Any, provenance: Provenance | None
) -> None:
    """`provenance` None: the sequence has no opd block and none is required; rows are checked as
    `topk` rows wherever they are, with K unknown."""
    tokens = _int_array(raw_tokens)
    if tokens is None:
        out.add(SHAPE, seq, None, "tokens is not a list of integers")
        return
    n = len(tokens)
    masks = _int_array(fields.get("masks"))
    if "masks" in fields and (masks is None or len(masks) != n):
        out.add(SHAPE, seq, None, f"masks is not a list of {n} integers")
        masks = None
    if masks is not None:
        bad = np.nonzero((masks != MASKED) & (masks != tokens))[0]
        out.add_rows(SHAPE, seq, bad, lambda p: f"mask {masks[p]} is neither -100 nor the token {tokens[p]}")
    inference = _float_array(fields.get("inference_logprobs"))
    if "inference_logprobs" in fields and (inference is None or len(inference) != n):
        out.add(SHAPE, seq, None, f"inference_logprobs is not a list of {n} numbers")
        inference = None
    generated = masks != MASKED if masks is not None else np.ones(n, dtype=bool)
    if inference is not None:
        with np.errstate(invalid="ignore"):
            bad_finite = np.nonzero(generated & ~np.isfinite(inference))[0]
            bad_positive = np.nonzero(generated & (inference > 0))[0]
        out.add_rows(NON_FINITE, seq, bad_finite, lambda p: f"inference_logprobs is {float(inference[p])!r}")
        out.add_rows(
            POSITIVE_LOGPROB,
            seq,
            bad_positive,
            lambda p: f"inference_logprobs is {float(inference[p])!r} > 0",
        )
    if provenance is not None:
        _check_spans(out, seq, n, generated, provenance)
    if "distill_token_ids" not in fields or "distill_logprobs" not in fields:
        return
    rows = _RowArrays.build(out, seq, n, fields["distill_token_ids"], fields["distill_logprobs"])
    if rows is None:
        return
    if provenance is None:
        _check_topk_rows(out, seq, rows, tokens, generated, (rows.lengths > 0) & generated, None)
        return
    scored = scored_position_mask(n, provenance)
    if provenance.mode == MODE_DENSE_K1:
        _check_dense_k1_rows(out, seq, rows, tokens, generated, scored, inference)
    else:
        _check_topk_rows(out, seq, rows, tokens, generated, scored, provenance.k)


def _check_spans(out: _Collector, seq: int, n: int, generated: np.ndarray, provenance: Provenance) -> None:
    spans = list(
        dict.fromkeys(provenance.turn_spans + [t.span for t in provenance.turns if t.span is not None])
    )
    for start, end in spans:
        if not 0 <= start <= end <= n:
            out.add(
                SPAN_OUTSIDE_GENERATED,
                seq,
                start,
                f"span [{start}, {end}) is not inside the sequence (n={n})",
            )
            continue
        masked = np.nonzero(~generated[start:end])[0]
        if masked.size:
            out.add(
                SPAN_OUTSIDE_GENERATED,
                seq,
                start + int(masked[0]),
                f"span [{start}, {end}) covers {masked.size} masked position(s), first at {start + int(masked[0])}",
            )


@dataclass
class _RowArrays:
    """All rows of one sequence flattened: entry arrays plus per-row lengths and starts."""

    ids: np.ndarray
    lps: np.ndarray
    lengths: np.ndarray
    starts: np.ndarray
    row_of_entry: np.ndarray
    offset_in_row: np.ndarray

    @classmethod
    def build(cls, out: _Collector, seq: int, n: int, ids_rows: Any, lp_rows: Any) -> _RowArrays | None:
        for name, rows in (("distill_token_ids", ids_rows), ("distill_logprobs", lp_rows)):
            if not isinstance(rows, list) or len(rows) != n:
                length = len(rows) if isinstance(rows, list) else type(rows).__name__
                out.add(SHAPE, seq, None, f"{name} has {length} rows, tokens has {n}")
                return None
        ids_rows = list(ids_rows)
        lp_rows = list(lp_rows)
        for pos in range(n):
            row_ids, row_lps = ids_rows[pos], lp_rows[pos]
            if not isinstance(row_ids, list) or not isinstance(row_lps, list):
                out.add(SHAPE, seq, pos, "row is not a list")
            elif len(row_ids) != len(row_lps):
                out.add(SHAPE, seq, pos, f"row has {len(row_ids)} ids but {len(row_lps)} logprobs")
            else:
                continue
            ids_rows[pos], lp_rows[pos] = [], []
        ids = _int_array(list(chain.from_iterable(ids_rows)))
        lps = _float_array(list(chain.from_iterable(lp_rows)))
        if ids is None or lps is None:
            for pos in range(n):
                bad_ids = _int_array(ids_rows[pos]) is None
                if bad_ids or _float_array(lp_rows[pos]) is None:
                    what = "ids are not all integers" if bad_ids else "logprobs are not all numbers"
                    out.add(SHAPE, seq, pos, f"row {what}")
                    ids_rows[pos], lp_rows[pos] = [], []
            ids = _int_array(list(chain.from_iterable(ids_rows)))
            lps = _float_array(list(chain.from_iterable(lp_rows)))
            assert ids is not None and lps is not None
        lengths = np.fromiter((len(row) for row in ids_rows), dtype=np.int64, count=n)
        starts = np.concatenate(([0], np.cumsum(lengths)[:-1])) if n else np.zeros(0, dtype=np.int64)
        row_of_entry = np.repeat(np.arange(n), lengths)
        offset_in_row = np.arange(len(ids)) - starts[row_of_entry]
        return cls(ids, lps, lengths, starts, row_of_entry, offset_in_row)

    def rows_where(self, entry_mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Rows with at least one flagged entry, and the first flagged entry index of each."""
        flagged = np.nonzero(entry_mask)[0]
        rows, first = np.unique(self.row_of_entry[flagged], return_index=True)
        return rows, flagged[first]

    def per_row_any(self, entry_mask: np.ndarray) -> np.ndarray:
        return np.bincount(self.row_of_entry[entry_mask], minlength=len(self.lengths)) > 0

    def row_repr(self, pos: int, limit: int = 4) -> str:
        start, length = int(self.starts[pos]), int(self.lengths[pos])
        ids = self.ids[start : start + min(length, limit)].tolist()
        lps = self.lps[start : start + min(length, limit)].tolist()
        more = "..." if length > limit else ""
        return f"ids={ids}{more} logprobs={lps}{more}"


def _zero_rows(rows: _RowArrays) -> np.ndarray:
    """Rows that are non-empty and hold only id 0 with logprob 0.0 (the reference's padding)."""
    nonzero = rows.per_row_any((rows.ids != 0) | (rows.lps != 0.0))
    return (rows.lengths > 0) & ~nonzero


def _check_finite_entries(out: _Collector, seq: int, rows: _RowArrays, skip: np.ndarray) -> np.ndarray:
    """Report non-finite and negative-id entries; returns rows that hold a non-finite value."""
    with np.errstate(invalid="ignore"):
        non_finite = ~np.isfinite(rows.lps)
    bad_rows, first = rows.rows_where(non_finite & ~skip[rows.row_of_entry])
    for pos, entry in zip(bad_rows.tolist(), first.tolist(), strict=True):
        out.add(
            NON_FINITE, seq, pos, f"logprob {float(rows.lps[entry])!r} at entry {entry - rows.starts[pos]}"
        )
    bad_rows, first = rows.rows_where((rows.ids < 0) & ~skip[rows.row_of_entry])
    for pos, entry in zip(bad_rows.tolist(), first.tolist(), strict=True):
        out.add(SHAPE, seq, pos, f"negative token id {rows.ids[entry]} at entry {entry - rows.starts[pos]}")
    return rows.per_row_any(non_finite)


def _check_topk_rows(
    out: _Collector,
    seq: int,
    rows: _RowArrays,
    tokens: np.ndarray,
    generated: np.ndarray,
    scored: np.ndarray,
    k: int | None,
) -> None:
    nonempty = rows.lengths > 0
    zero_padding = _zero_rows(rows) & ~scored
    out.add_rows(
        ZERO_PADDING,
        seq,
        np.nonzero(zero_padding)[0],
        lambda p: f"row {rows.row_repr(p)} claims probability 1 on token 0 where no turn was scored",
    )
    active = nonempty & ~zero_padding
    out.add_rows(
        ROW_AT_MASKED_POSITION,
        seq,
        np.nonzero(active & ~generated)[0],
        lambda p: f"masked (non-generated) position holds a row: {rows.row_repr(p)}",
    )
    out.add_rows(
        UNPROVENANCED_ROW,
        seq,
        np.nonzero(active & generated & ~scored)[0],
        lambda p: "generated position outside every scored turn holds a row",
    )
    out.add_rows(
        MISSING_ROW,
        seq,
        np.nonzero(~nonempty & generated & scored)[0],
        lambda p: "position inside a scored turn has an empty row",
    )
    non_finite_rows = _check_finite_entries(out, seq, rows, ~active)
    entry_active = active[rows.row_of_entry]
    bad_rows, first = rows.rows_where((rows.lps > 0) & entry_active)
    for pos, entry in zip(bad_rows.tolist(), first.tolist(), strict=True):
        out.add(
            POSITIVE_LOGPROB,
            seq,
            pos,
            f"logprob {float(rows.lps[entry])!r} > 0 at entry {entry - rows.starts[pos]}",
        )

    student = tokens[rows.row_of_entry]
    is_student = rows.ids == student
    has_student = rows.per_row_any(is_student)
    out.add_rows(
        STUDENT_TOKEN_MISSING,
        seq,
        np.nonzero(active & ~has_student)[0],
        lambda p: f"student token {tokens[p]} is not in the row {rows.row_repr(p)}",
    )
    order = np.lexsort((rows.ids, rows.row_of_entry))
    same = (rows.row_of_entry[order][1:] == rows.row_of_entry[order][:-1]) & (
        rows.ids[order][1:] == rows.ids[order][:-1]
    )
    duplicate_entry = np.zeros(len(rows.ids), dtype=bool)
    duplicate_entry[order[1:][same]] = True
    dup_rows, first = rows.rows_where(duplicate_entry)
    for pos, entry in zip(dup_rows.tolist(), first.tolist(), strict=True):
        if active[pos]:
            out.add(DUPLICATE_ID, seq, pos, f"token id {rows.ids[entry]} appears more than once")

    last_entry = np.clip(rows.starts + rows.lengths - 1, 0, None)
    last_is_student = np.zeros(len(rows.lengths), dtype=bool)
    if len(rows.ids):
        last_is_student = is_student[np.minimum(last_entry, len(rows.ids) - 1)] & (rows.lengths > 0)
    if k is not None:
        top_len = np.minimum(rows.lengths, k)
    else:  # K unknown (trainer mode without provenance): a final student token may be entry K+1
        top_len = rows.lengths - (last_is_student & (rows.lengths > 1))
    if k is not None:
        too_long = np.nonzero(active & (rows.lengths > k + 1))[0]
        out.add_rows(
            SHAPE, seq, too_long, lambda p: f"row has {rows.lengths[p]} entries, more than K+1={k + 1}"
        )
        extra = active & (rows.lengths == k + 1)
        out.add_rows(
            SHAPE,
            seq,
            np.nonzero(extra & has_student & ~last_is_student)[0],
            lambda p: f"row has K+1={k + 1} entries but entry K+1 is not the student token {tokens[p]}",
        )
    checkable = active & ~non_finite_rows
    in_top = rows.offset_in_row < top_len[rows.row_of_entry]
    rises = np.zeros(len(rows.lps), dtype=bool)
    if len(rows.lps) > 1:
        rises[1:] = rows.lps[1:] > rows.lps[:-1]
    unsorted_rows, first = rows.rows_where(
        rises & in_top & (rows.offset_in_row > 0) & checkable[rows.row_of_entry]
    )
    for pos, entry in zip(unsorted_rows.tolist(), first.tolist(), strict=True):
        out.add(
            UNSORTED,
            seq,
            pos,
            f"entry {entry - rows.starts[pos]} ({float(rows.lps[entry])!r}) > entry {entry - rows.starts[pos] - 1} "
            f"({float(rows.lps[entry - 1])!r}); rows must be sorted descending",
        )
    mass = _row_logsumexp(rows)
    with np.errstate(invalid="ignore"):
        heavy = np.nonzero(checkable & (mass > TOPK_MASS_TOLERANCE))[0]
    out.add_rows(
        TOPK_MASS,
        seq,
        heavy,
        lambda p: f"probability mass of the row's entries exceeds 1: logsumexp {mass[p]:.6g} > 0",
    )


def _row_logsumexp(rows: _RowArrays) -> np.ndarray:
    """Per-row logsumexp over all entries (-inf for empty rows)."""
    result = np.full(len(rows.lengths), -np.inf)
    nonempty = np.nonzero(rows.lengths > 0)[0]
    if nonempty.size == 0:
        return result
    seg_starts = rows.starts[nonempty]
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        peak = np.maximum.reduceat(rows.lps, seg_starts)
        safe_peak = np.where(np.isfinite(peak), peak, 0.0)
        shifted = np.exp(rows.lps - np.repeat(safe_peak, rows.lengths[nonempty]))
        result[nonempty] = safe_peak + np.log(np.add.reduceat(shifted, seg_starts))
    return result


def _check_dense_k1_rows(
    out: _Collector,
    seq: int,
    rows: _RowArrays,
    tokens: np.ndarray,
    generated: np.ndarray,
    scored: np.ndarray,
    inference: np.ndarray | None,
) -> None:
    n = len(tokens)
    wrong_length = np.nonzero(rows.lengths != 1)[0]
    out.add_rows(
        SHAPE, seq, wrong_length, lambda p: f"dense_k1 needs exactly 1 entry, row has {rows.lengths[p]}"
    )
    single = rows.lengths == 1
    first_entry = np.minimum(rows.starts, max(len(rows.ids) - 1, 0))
    ids = np.where(single, rows.ids[first_entry] if len(rows.ids) else 0, -1)
    lps = np.where(single, rows.lps[first_entry] if len(rows.lps) else 0.0, np.nan)
    teacher_pos = generated & scored
    expected = inference if inference is not None else np.full(n, np.nan)
    zero = single & (ids == 0) & (lps == 0.0) & ~teacher_pos & ((tokens != 0) | (expected != 0.0))
    out.add_rows(
        ZERO_PADDING, seq, np.nonzero(zero)[0], lambda p: "row [0]/[0.0] claims probability 1 on token 0"
    )
    live = single & ~zero
    out.add_rows(
        STUDENT_TOKEN_MISSING,
        seq,
        np.nonzero(live & (ids != tokens))[0],
        lambda p: f"dense_k1 row holds token {ids[p]}, not the student token {tokens[p]}",
    )
    with np.errstate(invalid="ignore"):
        non_finite = live & ~np.isfinite(lps)
        positive = live & teacher_pos & (lps > 0)
    out.add_rows(NON_FINITE, seq, np.nonzero(non_finite)[0], lambda p: f"logprob {float(lps[p])!r}")
    out.add_rows(
        POSITIVE_LOGPROB, seq, np.nonzero(positive)[0], lambda p: f"teacher logprob {float(lps[p])!r} > 0"
    )
    if inference is None:
        return
    copied = live & ~teacher_pos & ~non_finite
    mismatch = np.nonzero(copied & (lps != expected))[0]
    out.add_rows(
        DENSE_K1_MISMATCH,
        seq,
        mismatch,
        lambda p: (
            f"unscored position must copy inference_logprobs {float(expected[p])!r} exactly, holds {float(lps[p])!r}"
        ),
    )
