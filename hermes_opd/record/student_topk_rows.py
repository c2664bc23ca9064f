"""The sampler's own top-K rows, from one generation's response to the group's `student_topk` block
(docs/distill-format.md, "Student top-K"). Pure functions, no I/O.

A generation asked with `logprobs: K` returns one row per generated token (`GeneratedSequence.top_ids`,
`.top_logprobs`). `generation_rows` places them at the token positions the recorder gives that
generation in the sequence's `tokens`; `student_topk_block` turns a sequence's rows (and the teacher's
logprobs on their ids, where a turn was scored) into the extension block.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from hermes_opd.contract.student_topk import SAMPLER_MATCH_TOLERANCE, make_student_topk_block

TopRow = tuple[list[int], list[float]]
"""(ids best first, their sampling-time logprobs) at one generated position."""


def generation_rows(
    start: int,
    token_ids: Sequence[int],
    logprobs: Sequence[float],
    top_ids: Sequence[Sequence[int]],
    top_logprobs: Sequence[Sequence[float]],
) -> dict[int, TopRow]:
    """The rows of one generation whose first token sits at position `start`: position -> row.

    Raises ValueError when the rows do not line up with the tokens: not one row per token, a row
    whose ids and logprobs differ in length, or a row holding the sampled token at another logprob
    than the one sampled (beyond `SAMPLER_MATCH_TOLERANCE`; the validator would refuse the group)."""
    n = len(token_ids)
    if not len(logprobs) == len(top_ids) == len(top_logprobs) == n:
        raise ValueError(
            f"{n} generated ids, {len(logprobs)} logprobs, {len(top_ids)} top-id rows and "
            f"{len(top_logprobs)} top-logprob rows: one row per generated token is needed"
        )
    rows: dict[int, TopRow] = {}
    for j, (token, sampled, ids, lps) in enumerate(
        zip(token_ids, logprobs, top_ids, top_logprobs, strict=True)
    ):
        if len(ids) != len(lps):
            raise ValueError(f"generated token {j}: {len(ids)} top ids but {len(lps)} top logprobs")
        ids, lps = [int(i) for i in ids], [float(v) for v in lps]
        if token in ids and abs(lps[ids.index(token)] - float(sampled)) > SAMPLER_MATCH_TOLERANCE:
            raise ValueError(
                f"generated token {j} ({token}) has logprob {lps[ids.index(token)]} in its top-K row but "
                f"{sampled} as the sampled token's: the rows are not this generation's"
            )
        rows[start + j] = (ids, lps)
    return rows


def student_topk_block(
    k: int,
    rows: Mapping[int, TopRow],
    teacher: Mapping[int, Sequence[float | None]] | None = None,
) -> dict[str, Any]:
    """The `overrides[seq]["student_topk"]` block of a sequence's rows, positions ascending.

    `teacher` maps a position the teacher scored to the teacher's logprob of each of that row's ids
    (None: unknown). Without it the block has no `teacher_logprobs`; with it, positions the teacher
    did not score get `[]`."""
    if k < 1:
        raise ValueError(f"student top-K needs k >= 1, got {k}")
    positions = sorted(rows)
    teacher_rows = None
    if teacher is not None:
        stray = sorted(set(teacher) - set(rows))
        if stray:
            raise ValueError(f"teacher logprobs at positions {stray[:5]} that have no student row")
        teacher_rows = []
        for p in positions:
            row = list(teacher.get(p, []))
            if row and len(row) != len(rows[p][0]):
                raise ValueError(
                    f"position {p}: {len(row)} teacher logprobs for {len(rows[p][0])} student ids"
                )
            teacher_rows.append(row)
    return make_student_topk_block(
        k, positions, [rows[p][0] for p in positions], [rows[p][1] for p in positions], teacher_rows
    )
