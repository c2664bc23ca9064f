"""The student's own top-K at sampling time: a versioned extension of the distill contract
(docs/distill-format.md, "Student top-K"). Build the block, and check it. Pure functions.

It travels in `overrides[seq]["student_topk"]` (Atropos' API drops unknown top-level group fields
but keeps `overrides`):

    {"version": 1, "k": K,
     "positions": [p, ...],                 # generated positions, ascending
     "ids": [[id, ...], ...],               # the sampler's top-K ids at each position, best first
     "logprobs": [[lp, ...], ...],          # the sampler's raw logprobs of those ids
     "teacher_logprobs": [[lp | null, ...], ...],   # optional: the teacher's logprob of each id
     "teacher_unknown": n}                  # how many of those are null

`teacher_logprobs` is present only at positions the teacher scored; it is `[]` elsewhere. A null
means the teacher path did not return that id (a vLLM path: it lies outside the teacher's top-K):
the logprob is unknown and never invented; the trainer leaves such an entry out of every subset.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from hermes_opd.contract.constants import POSITIVE_NOISE_TOLERANCE, TOPK_MASS_TOLERANCE

STUDENT_TOPK_KEY = "student_topk"
STUDENT_TOPK_VERSION = 1
SUPPORTED_STUDENT_TOPK_VERSIONS = (1,)
SAMPLER_MATCH_TOLERANCE = 1e-4
"""The sampled token's logprob in its top-K row must equal `inference_logprobs` within this."""


@dataclass(frozen=True)
class StudentTopK:
    """A checked `student_topk` block."""

    k: int
    positions: list[int]
    ids: list[list[int]]
    logprobs: list[list[float]]
    teacher_logprobs: list[list[float | None]]
    """Parallel to `ids` at every position ([] where the teacher did not score it)."""


def make_student_topk_block(
    k: int,
    positions: Sequence[int],
    ids: Sequence[Sequence[int]],
    logprobs: Sequence[Sequence[float]],
    teacher_logprobs: Sequence[Sequence[float | None]] | None = None,
) -> dict[str, Any]:
    """The `overrides[seq]["student_topk"]` block (see the module docstring)."""
    block: dict[str, Any] = {
        "version": STUDENT_TOPK_VERSION,
        "k": int(k),
        "positions": [int(p) for p in positions],
        "ids": [[int(i) for i in row] for row in ids],
        "logprobs": [[float(v) for v in row] for row in logprobs],
    }
    if teacher_logprobs is not None:
        rows = [[None if v is None else float(v) for v in row] for row in teacher_logprobs]
        block["teacher_logprobs"] = rows
        block["teacher_unknown"] = sum(1 for row in rows for v in row if v is None)
    return block


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_logprob(value: Any) -> bool:
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value <= POSITIVE_NOISE_TOLERANCE
    )


def _check_row(
    j: int, pos: int, k: int, ids: Any, lps: Any, tokens: Sequence[int], inference: Sequence[float] | None
) -> str | None:
    if not isinstance(ids, list) or not isinstance(lps, list) or len(ids) != len(lps):
        return f"row {j}: ids and logprobs are not two lists of one length"
    if not 1 <= len(ids) <= k:
        return f"row {j}: {len(ids)} entries, expected 1..{k}"
    if not all(_is_int(i) and i >= 0 for i in ids):
        return f"row {j}: an id is not a non-negative integer: {ids!r:.80}"
    if len(set(ids)) != len(ids):
        return f"row {j}: duplicate ids {ids!r:.80}"
    if not all(_is_logprob(v) for v in lps):
        return f"row {j}: a logprob is not a finite number <= 0: {lps!r:.80}"
    if any(b > a + TOPK_MASS_TOLERANCE for a, b in zip(lps, lps[1:], strict=False)):
        return f"row {j}: logprobs are not sorted best first: {lps!r:.80}"
    if math.log(sum(math.exp(v) for v in lps)) > TOPK_MASS_TOLERANCE:
        return f"row {j}: the top-{len(lps)} mass exceeds 1"
    token = tokens[pos]
    if inference is not None and token in ids:
        sampled = lps[ids.index(token)]
        if abs(sampled - inference[pos]) > SAMPLER_MATCH_TOLERANCE:
            return (
                f"row {j}: the sampled token {token} has logprob {sampled} in the row but "
                f"{inference[pos]} in inference_logprobs"
            )
    return None


def student_topk_problems(
    block: Any, tokens: Sequence[int], generated: Sequence[bool], inference: Sequence[float] | None
) -> list[tuple[int | None, str]]:
    """Every way `block` breaks the extension, as (position or None, message)."""
    if not isinstance(block, dict):
        return [(None, f"student_topk is a {type(block).__name__}, not an object")]
    if block.get("version") not in SUPPORTED_STUDENT_TOPK_VERSIONS:
        return [
            (
                None,
                f"student_topk version {block.get('version')!r} is not one of {SUPPORTED_STUDENT_TOPK_VERSIONS}",
            )
        ]
    k, positions, ids, lps = block.get("k"), block.get("positions"), block.get("ids"), block.get("logprobs")
    if not _is_int(k) or k < 1:
        return [(None, f"student_topk.k must be an integer >= 1, got {k!r}")]
    if not (isinstance(positions, list) and isinstance(ids, list) and isinstance(lps, list)):
        return [(None, "student_topk.positions, ids and logprobs must be lists")]
    if not len(positions) == len(ids) == len(lps):
        return [
            (
                None,
                f"student_topk has {len(positions)} positions, {len(ids)} id rows, {len(lps)} logprob rows",
            )
        ]
    n = len(tokens)
    if not all(_is_int(p) for p in positions) or any(
        b <= a for a, b in zip(positions, positions[1:], strict=False)
    ):
        return [(None, "student_topk.positions must be strictly ascending integers")]
    problems: list[tuple[int | None, str]] = []
    for j, pos in enumerate(positions):
        if not 0 <= pos < n or not generated[pos]:
            problems.append(
                (pos, f"student_topk row {j} is at position {pos}, which the policy did not generate")
            )
            continue
        problem = _check_row(j, pos, k, ids[j], lps[j], tokens, inference)
        if problem:
            problems.append((pos, f"student_topk {problem}"))
    teacher = block.get("teacher_logprobs")
    if teacher is None:
        return problems
    if not isinstance(teacher, list) or len(teacher) != len(positions):
        return [*problems, (None, f"student_topk.teacher_logprobs must be a list of {len(positions)} rows")]
    unknown = 0
    for j, (pos, row) in enumerate(zip(positions, teacher, strict=True)):
        if row == []:
            continue
        if not isinstance(row, list) or not isinstance(ids[j], list) or len(row) != len(ids[j]):
            problems.append((pos, f"student_topk teacher row {j} is not [] or parallel to its ids"))
            continue
        if not all(v is None or _is_logprob(v) for v in row):
            problems.append((pos, f"student_topk teacher row {j}: not a logprob <= 0 or null: {row!r:.80}"))
        unknown += sum(1 for v in row if v is None)
    if block.get("teacher_unknown") != unknown:
        problems.append(
            (None, f"student_topk.teacher_unknown is {block.get('teacher_unknown')!r}, counted {unknown}")
        )
    return problems


def parse_student_topk(block: dict[str, Any]) -> StudentTopK:
    """A block that `student_topk_problems` found no problem in, as a `StudentTopK`."""
    positions = [int(p) for p in block["positions"]]
    teacher = block.get("teacher_logprobs") or [[] for _ in positions]
    return StudentTopK(
        k=int(block["k"]),
        positions=positions,
        ids=[list(row) for row in block["ids"]],
        logprobs=[[float(v) for v in row] for row in block["logprobs"]],
        teacher_logprobs=[list(row) for row in teacher],
    )


def teacher_logprobs_on(
    student_ids_rows: Sequence[Sequence[int]],
    teacher_ids_rows: Sequence[Sequence[int]],
    teacher_lp_rows: Sequence[Sequence[float]],
) -> tuple[list[list[float | None]], int]:
    """The teacher's logprob of each student top-K id, read from the teacher's rows of the same
    positions (a vLLM path: its top-K plus the sampled token), and how many are unknown.

    An id the row does not hold is None: unknown, never invented. A position without a teacher row
    gets [] (not scored)."""
    if not len(student_ids_rows) == len(teacher_ids_rows) == len(teacher_lp_rows):
        raise ValueError(
            f"{len(student_ids_rows)} student rows, {len(teacher_ids_rows)} teacher id rows, "
            f"{len(teacher_lp_rows)} teacher logprob rows"
        )
    out: list[list[float | None]] = []
    unknown = 0
    for student, ids, lps in zip(student_ids_rows, teacher_ids_rows, teacher_lp_rows, strict=True):
        if not ids:
            out.append([])
            continue
        known = dict(zip(ids, lps, strict=True))
        row = [known.get(i) for i in student]
        unknown += sum(1 for v in row if v is None)
        out.append(row)
    return out, unknown
