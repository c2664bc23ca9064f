"""The distill data contract, version 1 (docs/distill-format.md): pack, convert, validate.

Pure functions, no I/O. The env packs teacher rows with `normalize_row` + `place_turn_rows`,
optionally converts them with `to_dense_k1`, and `validate_group` checks a whole
`ScoredDataGroup` dict against the contract (used by `hermes-opd validate` and by tests).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import chain
from typing import Any

import numpy as np

from hermes_opd.trajectory import MASKED

FORMAT_VERSION = 1

MODE_TOPK = "topk"
MODE_DENSE_K1 = "dense_k1"
MODES = (MODE_TOPK, MODE_DENSE_K1)

TURN_STATUSES = ("scored", "no_hint", "no_next_state", "judge_error", "teacher_error", "skipped")
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


# ---------------------------------------------------------------------------------------------
# Provenance
# ---------------------------------------------------------------------------------------------


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _as_span(value: Any) -> tuple[int, int] | None:
    if isinstance(value, list | tuple) and len(value) == 2 and all(_is_int(v) for v in value):
        return int(value[0]), int(value[1])
    return None


@dataclass(frozen=True)
class TurnRecord:
    """One entry of `overrides[seq]["opd"]["turns"]`, parsed leniently."""

    span: tuple[int, int] | None
    status: str
    hint: str | None = None
    votes: dict[str, Any] | None = None
    next_state_role: str | None = None
    message_index: int | None = None
    hint_insert_at: int | None = None
    hint_token_ids: list[int] | None = None
    teacher_prompt_len: int | None = None

    @property
    def is_scored(self) -> bool:
        return self.status == "scored" and self.span is not None


@dataclass(frozen=True)
class Provenance:
    """A parsed `overrides[seq]["opd"]` block plus everything wrong with it."""

    format_version: Any = None
    mode: str = MODE_TOPK
    k: int | None = None
    turn_spans: list[tuple[int, int]] = field(default_factory=list)
    turns: list[TurnRecord] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def scored_turns(self) -> list[TurnRecord]:
        return [turn for turn in self.turns if turn.is_scored]


def _parse_turn(index: int, raw: Any, problems: list[str]) -> TurnRecord | None:
    if not isinstance(raw, dict):
        problems.append(f"turns[{index}] is not an object")
        return None
    span = _as_span(raw.get("span"))
    if span is None:
        problems.append(f"turns[{index}].span is not [start, end]: {raw.get('span')!r}")
    status = raw.get("status")
    if status not in TURN_STATUSES:
        problems.append(f"turns[{index}].status {status!r} is not one of {TURN_STATUSES}")
        status = str(status)
    hint = raw.get("hint")
    votes = raw.get("votes")
    hint_token_ids = raw.get("hint_token_ids")
    record = TurnRecord(
        span=span,
        status=status,
        hint=hint if isinstance(hint, str) else None,
        votes=votes if isinstance(votes, dict) else None,
        next_state_role=raw.get("next_state_role"),
        message_index=raw.get("message_index") if _is_int(raw.get("message_index")) else None,
        hint_insert_at=raw.get("hint_insert_at") if _is_int(raw.get("hint_insert_at")) else None,
        hint_token_ids=hint_token_ids
        if isinstance(hint_token_ids, list) and all(_is_int(t) for t in hint_token_ids)
        else None,
        teacher_prompt_len=raw.get("teacher_prompt_len") if _is_int(raw.get("teacher_prompt_len")) else None,
    )
    if status == "scored":
        _check_scored_turn(index, raw, record, problems)
    return record


def _check_scored_turn(index: int, raw: dict[str, Any], turn: TurnRecord, problems: list[str]) -> None:
    where = f"turns[{index}] (scored)"
    if not turn.hint:
        problems.append(f"{where}: hint is missing or empty")
    if turn.votes is None:
        problems.append(f"{where}: votes is missing")
    if turn.next_state_role not in NEXT_STATE_ROLES:
        problems.append(f"{where}: next_state_role {raw.get('next_state_role')!r} is not tool/user")
    if turn.message_index is None:
        problems.append(f"{where}: message_index is missing")
    if turn.hint_insert_at is None or turn.hint_token_ids is None or turn.teacher_prompt_len is None:
        problems.append(f"{where}: hint_insert_at, hint_token_ids and teacher_prompt_len are all required")
        return
    if turn.span is None:
        return
    start = turn.span[0]
    if not 0 <= turn.hint_insert_at <= start:
        problems.append(f"{where}: hint_insert_at {turn.hint_insert_at} is not within [0, {start}]")
    expected = start + len(turn.hint_token_ids)
    if turn.teacher_prompt_len != expected:
        problems.append(
            f"{where}: teacher_prompt_len {turn.teacher_prompt_len} != span start {start} + "
            f"{len(turn.hint_token_ids)} hint tokens = {expected}"
        )


def parse_provenance(opd: Any) -> Provenance:
    """Parse an `overrides[seq]["opd"]` block; `problems` lists every way it breaks the contract."""
    problems: list[str] = []
    if not isinstance(opd, dict):
        return Provenance(problems=['overrides[seq]["opd"] is missing or not an object'])
    version = opd.get("format_version")
    if version != FORMAT_VERSION or not _is_int(version):
        problems.append(f"format_version is {version!r}, expected {FORMAT_VERSION}")
    mode = opd.get("mode")
    if mode not in MODES:
        problems.append(f"mode {mode!r} is not one of {MODES}; rows are checked as {MODE_TOPK}")
        mode = MODE_TOPK
    k = opd.get("k")
    if not _is_int(k) or k < 1:
        problems.append(f"k {k!r} is not a positive integer")
        k = None
    raw_spans = opd.get("turn_spans")
    spans: list[tuple[int, int]] = []
    if not isinstance(raw_spans, list):
        problems.append("turn_spans is missing or not a list")
    else:
        for i, raw in enumerate(raw_spans):
            span = _as_span(raw)
            if span is None:
                problems.append(f"turn_spans[{i}] is not [start, end]: {raw!r}")
            else:
                spans.append(span)
        for (s0, e0), (s1, e1) in zip(spans, spans[1:], strict=False):
            if s0 > e0 or e0 > s1 or s1 > e1:
                problems.append(f"turn_spans are not ordered and disjoint: [{s0}, {e0}) then [{s1}, {e1})")
    raw_turns = opd.get("turns")
    turns: list[TurnRecord] = []
    if not isinstance(raw_turns, list):
        problems.append("turns is missing or not a list")
    else:
        for i, raw in enumerate(raw_turns):
            turn = _parse_turn(i, raw, problems)
            if turn is not None:
                turns.append(turn)
        if isinstance(raw_spans, list) and len(raw_turns) != len(raw_spans):
            problems.append(f"{len(raw_turns)} turns but {len(raw_spans)} turn_spans (one entry per turn)")
        elif [t.span for t in turns] != spans and len(turns) == len(spans):
            problems.append("turns[*].span differs from turn_spans")
    return Provenance(
        format_version=version, mode=mode, k=k, turn_spans=spans, turns=turns, problems=problems
    )


def scored_position_mask(n: int, provenance: Provenance) -> np.ndarray:
    """Boolean [n]: True inside the span of a turn whose status is `scored` (clipped to [0, n))."""
    mask = np.zeros(n, dtype=bool)
    for turn in provenance.scored_turns:
        start, end = turn.span  # type: ignore[misc]
        mask[max(start, 0) : max(min(end, n), 0)] = True
    return mask


def scored_positions(group: dict[str, Any], seq: int) -> np.ndarray:
    """Boolean [n]: positions of `group` sequence `seq` that carry teacher data.

    `topk`: every non-empty row. `dense_k1`: generated positions inside scored turns (the other
    rows hold the student's own logprob, not teacher data).
    """
    tokens = group["tokens"][seq]
    n = len(tokens)
    provenance = _provenance_of(group, seq)
    if provenance.mode == MODE_DENSE_K1:
        masks = np.asarray(group["masks"][seq])
        return scored_position_mask(n, provenance) & (masks != MASKED)
    rows = group.get("distill_token_ids") or []
    if seq >= len(rows) or not isinstance(rows[seq], list):
        return np.zeros(n, dtype=bool)
    return np.array([bool(row) for row in rows[seq]], dtype=bool)


def _provenance_of(group: dict[str, Any], seq: int) -> Provenance:
    overrides = group.get("overrides")
    if isinstance(overrides, list) and seq < len(overrides) and isinstance(overrides[seq], dict):
        return parse_provenance(overrides[seq].get("opd"))
    return parse_provenance(None)


# ---------------------------------------------------------------------------------------------
# Validation
# ---------------------------------------------------------------------------------------------

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
)

GROUP_FIELDS = ("tokens", "masks", "scores", "inference_logprobs", "distill_token_ids", "distill_logprobs")


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


def validate_group(group: dict[str, Any], group_index: int = 0) -> list[Violation]:
    """Every contract violation of one ScoredDataGroup dict, sorted by (seq, pos)."""
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
        if not isinstance(value, list):
            out.add(SHAPE, None, None, f"field {name!r} is missing or not a list")
        elif len(value) != n_seqs:
            out.add(SHAPE, None, None, f"field {name!r} has {len(value)} sequences, tokens has {n_seqs}")
        else:
            present[name] = value
    overrides = group.get("overrides")
    overrides_ok = isinstance(overrides, list) and len(overrides) == n_seqs
    if not overrides_ok:
        out.add(
            PROVENANCE, None, None, f"overrides must be a list of {n_seqs} objects, got {overrides!r:.80}"
        )
    for seq in range(n_seqs):
        override = overrides[seq] if overrides_ok else None
        opd = override.get("opd") if isinstance(override, dict) else None
        provenance = parse_provenance(opd)
        if overrides_ok:
            for problem in provenance.problems:
                out.add(PROVENANCE, seq, None, problem)
        _validate_sequence(
            out, seq, {name: value[seq] for name, value in present.items()}, tokens[seq], provenance
        )
    out.violations.sort(key=lambda v: (-1 if v.seq is None else v.seq, -1 if v.pos is None else v.pos))
    return out.violations


def _int_array(values: Any) -> np.ndarray | None:
    """`values` as int64 [len], or None unless it is a list of integers."""
    if not isinstance(values, list):
        return None
    if not values:
        return np.zeros(0, dtype=np.int64)
    try:
        array = np.asarray(values)
    except (ValueError, OverflowError):
        return None
    if array.ndim != 1 or array.dtype.kind not in "iu":
        return None
    return array.astype(np.int64, copy=False)


def _float_array(values: Any) -> np.ndarray | None:
    """`values` as float64 [len], or None unless it is a list of numbers (JSON NaN/Infinity included)."""
    if not isinstance(values, list):
        return None
    if not values:
        return np.zeros(0, dtype=np.float64)
    try:
        array = np.asarray(values)
    except (ValueError, OverflowError):
        return None
    if array.ndim != 1 or array.dtype.kind not in "iuf":
        return None
    return array.astype(np.float64, copy=False)


def _validate_sequence(
    out: _Collector, seq: int, fields: dict[str, Any], raw_tokens: Any, provenance: Provenance
) -> None:
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
        out.add_rows(NON_FINITE, seq, bad_finite, lambda p: f"inference_logprobs is {inference[p]!r}")
        out.add_rows(
            POSITIVE_LOGPROB, seq, bad_positive, lambda p: f"inference_logprobs is {inference[p]!r} > 0"
        )
    _check_spans(out, seq, n, generated, provenance)
    if "distill_token_ids" not in fields or "distill_logprobs" not in fields:
        return
    rows = _RowArrays.build(out, seq, n, fields["distill_token_ids"], fields["distill_logprobs"])
    if rows is None:
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
        out.add(NON_FINITE, seq, pos, f"logprob {rows.lps[entry]!r} at entry {entry - rows.starts[pos]}")
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
            POSITIVE_LOGPROB, seq, pos, f"logprob {rows.lps[entry]!r} > 0 at entry {entry - rows.starts[pos]}"
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

    top_len = np.minimum(rows.lengths, k) if k is not None else rows.lengths
    if k is not None:
        too_long = np.nonzero(active & (rows.lengths > k + 1))[0]
        out.add_rows(
            SHAPE, seq, too_long, lambda p: f"row has {rows.lengths[p]} entries, more than K+1={k + 1}"
        )
        extra = active & (rows.lengths == k + 1)
        last_entry = np.clip(rows.starts + rows.lengths - 1, 0, None)
        last_is_student = np.zeros_like(extra)
        if len(rows.ids):
            last_is_student = is_student[np.minimum(last_entry, len(rows.ids) - 1)]
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
            f"entry {entry - rows.starts[pos]} ({rows.lps[entry]!r}) > entry {entry - rows.starts[pos] - 1} "
            f"({rows.lps[entry - 1]!r}); rows must be sorted descending",
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
    with np.errstate(invalid="ignore", over="ignore"):
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
    out.add_rows(NON_FINITE, seq, np.nonzero(non_finite)[0], lambda p: f"logprob {lps[p]!r}")
    out.add_rows(POSITIVE_LOGPROB, seq, np.nonzero(positive)[0], lambda p: f"teacher logprob {lps[p]!r} > 0")
    if inference is None:
        return
    copied = live & ~teacher_pos & ~non_finite
    mismatch = np.nonzero(copied & (lps != expected))[0]
    out.add_rows(
        DENSE_K1_MISMATCH,
        seq,
        mismatch,
        lambda p: f"unscored position must copy inference_logprobs {expected[p]!r} exactly, holds {lps[p]!r}",
    )
