"""Reading and validating Atropos groups (the checks behind collate.py), in the env's own
(unshifted) position space.

Modes
-----
`topk` rows are used as they are. `dense_k1` rows (one entry at every position, for stock
tinker-atropos) are read back through their provenance: only rows inside turns whose status is
`scored` are teacher data; the rest are copies of `inference_logprobs` or Atropos' 1.0 placeholder
and are dropped, so dense_k1 trains like topk with K = 1.

The distill contract is checked by the project's one validator (`hermes_opd.contract.validation`,
the same code `hermes-opd validate` and the env run, with the same tolerance), in its trainer mode:
groups from other envs may lack provenance, inference logprobs or distill fields. Its first violation
is raised as `BatchValidationError`, whose message names the group index, the sequence and the
position, because a silently mis-shifted or zero-filled row trains the policy towards a false
certainty (see docs/distill-format.md, "never zeros"). This module adds only what a trainer needs
on top: the vocabulary range, at least two tokens per sequence, finite scores, and reading
`dense_k1` rows back through their provenance.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import chain
from typing import Any

import numpy as np

from hermes_opd.contract.constants import MASKED
from hermes_opd.contract.errors import HermesOPDError
from hermes_opd.contract.process_reward import PRM_KEY, parse_prm_block
from hermes_opd.contract.provenance import parse_provenance, scored_position_mask
from hermes_opd.contract.student_topk import STUDENT_TOPK_KEY, StudentTopK, parse_student_topk
from hermes_opd.contract.validation import validate_group as contract_violations


class BatchValidationError(HermesOPDError, ValueError):
    """A group breaks the data contract. `group`, `sequence` and `position` say where."""

    def __init__(
        self, message: str, *, group: int, sequence: int | None = None, position: int | None = None
    ) -> None:
        where = f"group {group}"
        if sequence is not None:
            where += f", sequence {sequence}"
        if position is not None:
            where += f", position {position}"
        super().__init__(f"{where}: {message}")
        self.group = group
        self.sequence = sequence
        self.position = position


@dataclass(frozen=True)
class CollateOptions:
    """Knobs of collation; every field has a safe default."""

    pad_token_id: int = 0
    """Id written into padded input/target positions (never trained on)."""
    vocab_size: int | None = None
    """When set, teacher ids and tokens must lie in [0, vocab_size)."""
    advantage_eps: float = 1e-6
    """Added to the group std before dividing (GRPO)."""
    normalize_advantage_std: bool = True
    """Divide (score - mean) by the group std; False gives the mean-centred (Dr. GRPO) variant."""


def group_advantages(scores: Sequence[float], *, eps: float = 1e-6, normalize_std: bool = True) -> np.ndarray:
    """GRPO advantages of one group: (score - mean) / (std + eps), population std.

    A group whose scores are all equal gets exactly 0 (not a rounding residue / eps): it carries no
    preference signal, but its sequences still train the OPD term. A group of one gets 0.
    """
    values = np.asarray(scores, dtype=np.float64)
    if values.size == 0 or float(values.max() - values.min()) == 0.0:
        return np.zeros_like(values)
    centred = values - values.mean()
    if normalize_std:
        centred = centred / (values.std() + eps)
    return centred


@dataclass
class ValidatedSequence:
    """Validated arrays of one sequence, still in the env's (unshifted) position space."""

    tokens: np.ndarray
    generated: np.ndarray
    inference_logprobs: np.ndarray | None
    advantages: np.ndarray
    row_lengths: np.ndarray
    row_ids: np.ndarray
    row_logprobs: np.ndarray
    teacher_token_logprobs: np.ndarray
    score: float
    group: int
    student_topk: StudentTopK | None = None
    """The sampler's own top-K rows (`overrides[seq]["student_topk"]`), when the env sent them."""
    prm_advantages: np.ndarray | None = None
    """The per-token process reward (`advantages` under an `overrides[seq]["prm"]` block), if any."""
    prm_mask: np.ndarray | None = None
    """bool: the positions of the effective PRM turns (those the PRM term trains, 0 scores included)."""


def _as_list(value: Any, name: str, group: int, seq: int | None = None) -> list:
    if not isinstance(value, list):
        raise BatchValidationError(
            f"'{name}' must be a list, got {type(value).__name__}", group=group, sequence=seq
        )
    return value


def _first(mask: np.ndarray) -> int:
    return int(np.flatnonzero(mask)[0])


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _float_array(values: list, what: str, group: int, seq: int) -> np.ndarray:
    """`values` as float64; a non-number is reported at its position."""
    for pos, value in enumerate(values):
        if not _is_number(value):
            raise BatchValidationError(
                f"{what} is not a number: {value!r}", group=group, sequence=seq, position=pos
            )
    return np.asarray(values, dtype=np.float64)


def _flatten_rows(ids_rows: list, lp_rows: list, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Row lengths [n] and all entries of all rows, flat, as (int64 ids, float64 logprobs). The rows
    have passed the contract validator, so they are well-formed lists of numbers."""
    lengths = np.fromiter((len(row) for row in ids_rows), dtype=np.int64, count=n)
    total = int(lengths.sum())
    ids = np.fromiter(chain.from_iterable(ids_rows), dtype=np.int64, count=total)
    lps = np.fromiter(chain.from_iterable(lp_rows), dtype=np.float64, count=total)
    return lengths, ids, lps


def _rows_arrays(
    ids_rows: list, lp_rows: list, tokens: np.ndarray, options: CollateOptions, group: int, seq: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Row lengths, flat ids, flat logprobs, and the teacher logprob of the student's own token per
    position (NaN where the row is empty), with the vocabulary range checked when it is known."""
    n = len(tokens)
    lengths, flat_ids, flat_lps = _flatten_rows(ids_rows, lp_rows, n)
    row_of_entry = np.repeat(np.arange(n), lengths)
    if options.vocab_size is not None and flat_ids.size:
        bad = (flat_ids < 0) | (flat_ids >= options.vocab_size)
        if bad.any():
            i = _first(bad)
            raise BatchValidationError(
                f"distill token id {flat_ids[i]} outside the vocabulary [0, {options.vocab_size})",
                group=group,
                sequence=seq,
                position=int(row_of_entry[i]),
            )
    hit = flat_ids == tokens[row_of_entry]
    teacher_token = np.full(n, np.nan)
    teacher_token[row_of_entry[hit]] = flat_lps[hit]
    return lengths, flat_ids, flat_lps, teacher_token


_OPTIONAL_PER_SEQUENCE = (
    "inference_logprobs",
    "advantages",
    "distill_token_ids",
    "distill_logprobs",
    "overrides",
)


def _dense_k1_teacher_positions(override: Any, n: int, group: int, seq: int) -> np.ndarray | None:
    """For a `dense_k1` sequence (docs/distill-format.md, Modes), the positions whose row is real
    teacher data: those inside the span of a turn with status `scored`. Every other dense_k1 row is
    a copy of `inference_logprobs` (or Atropos' 1.0 placeholder) and is dropped here, so dense_k1
    data trains exactly like the equivalent `topk` data with K = 1. None for any other mode."""
    opd = override.get("opd") if isinstance(override, Mapping) else None
    if not isinstance(opd, Mapping) or opd.get("mode") != "dense_k1":
        return None
    turns = opd.get("turns")
    if not isinstance(turns, list):
        raise BatchValidationError(
            "dense_k1 rows need overrides[i]['opd']['turns'] to tell teacher rows from copies",
            group=group,
            sequence=seq,
        )
    return scored_position_mask(n, parse_provenance(opd))


def _per_sequence_fields(raw: Mapping[str, Any], group: int) -> dict[str, list]:
    """The group's per-sequence lists (required and present optional ones), lengths checked."""
    if not isinstance(raw, Mapping):
        raise BatchValidationError(f"a group must be a dict, got {type(raw).__name__}", group=group)
    for key in ("tokens", "masks", "scores"):
        if raw.get(key) is None:
            raise BatchValidationError(f"missing required field '{key}'", group=group)
    present = ("tokens", "masks", "scores", *(k for k in _OPTIONAL_PER_SEQUENCE if raw.get(k) is not None))
    fields_ = {key: _as_list(raw[key], key, group) for key in present}
    n_seq = len(fields_["tokens"])
    if n_seq == 0:
        raise BatchValidationError("group has no sequences", group=group)
    for key, value in fields_.items():
        if len(value) != n_seq:
            raise BatchValidationError(
                f"'{key}' has {len(value)} entries but 'tokens' has {n_seq} sequences", group=group
            )
    if ("distill_token_ids" in fields_) != ("distill_logprobs" in fields_):
        raise BatchValidationError("distill_token_ids and distill_logprobs must come together", group=group)
    return fields_


def _group_scores(scores: list, group: int) -> np.ndarray:
    for seq, value in enumerate(scores):
        if not _is_number(value) or not math.isfinite(value):
            raise BatchValidationError(f"score {value!r} is not a finite number", group=group, sequence=seq)
    return np.asarray(scores, dtype=np.float64)


def _per_position(values: list, n: int, what: str, group: int, seq: int) -> np.ndarray:
    array = _float_array(_as_list(values, what, group, seq), what, group, seq)
    if len(array) != n:
        raise BatchValidationError(
            f"{what} has {len(array)} positions but tokens has {n}", group=group, sequence=seq
        )
    return array


def _validate_sequence(
    fields_: dict[str, list], seq: int, group_adv: float, score: float, group: int, options: CollateOptions
) -> ValidatedSequence:
    tokens = np.asarray(fields_["tokens"][seq], dtype=np.int64)
    n = len(tokens)
    if n < 2:
        raise BatchValidationError(
            f"sequence has {n} tokens; at least 2 are needed to predict one", group=group, sequence=seq
        )
    if options.vocab_size is not None:
        outside = (tokens < 0) | (tokens >= options.vocab_size)
        if outside.any():
            pos = _first(outside)
            raise BatchValidationError(
                f"token {tokens[pos]} outside the vocabulary [0, {options.vocab_size})",
                group=group,
                sequence=seq,
                position=pos,
            )
    generated = np.asarray(fields_["masks"][seq], dtype=np.int64) != MASKED
    inference = None
    if "inference_logprobs" in fields_:
        inference = np.asarray(fields_["inference_logprobs"][seq], dtype=np.float64)
    prm_advantages, prm_mask = _process_reward(fields_, seq, n)
    if prm_advantages is not None:  # `advantages` carry the process reward: GRPO keeps the group's
        advantages = np.full(n, group_adv)
    elif "advantages" in fields_:
        advantages = _per_position(fields_["advantages"][seq], n, "advantages", group, seq)
        bad = generated & ~np.isfinite(advantages)
        if bad.any():
            raise BatchValidationError(
                "advantage is not finite", group=group, sequence=seq, position=_first(bad)
            )
    else:
        advantages = np.full(n, group_adv)

    if "distill_token_ids" in fields_:
        ids_rows, lp_rows = fields_["distill_token_ids"][seq], fields_["distill_logprobs"][seq]
        lengths, ids, lps, teacher_token = _rows_arrays(ids_rows, lp_rows, tokens, options, group, seq)
    else:
        lengths, ids, lps = np.zeros(n, np.int64), np.zeros(0, np.int64), np.zeros(0)
        teacher_token = np.full(n, np.nan)
    return ValidatedSequence(
        tokens=tokens,
        generated=generated,
        inference_logprobs=inference,
        advantages=advantages,
        row_lengths=lengths,
        row_ids=ids,
        row_logprobs=lps,
        teacher_token_logprobs=teacher_token,
        score=score,
        group=group,
        student_topk=_student_topk(fields_, seq),
        prm_advantages=prm_advantages,
        prm_mask=prm_mask,
    )


def _process_reward(
    fields_: dict[str, list], seq: int, n: int
) -> tuple[np.ndarray | None, np.ndarray | None]:
    """(per-token process reward, effective-turn mask) when the sequence has a PRM block
    (hermes_opd/contract/process_reward.py; the contract validator has already checked it against
    `advantages`), else (None, None)."""
    override = fields_["overrides"][seq] if "overrides" in fields_ else None
    block = override.get(PRM_KEY) if isinstance(override, Mapping) else None
    if block is None:
        return None, None
    turns, _ = parse_prm_block(block, n)
    mask = np.zeros(n, dtype=bool)
    for turn in turns:
        if turn.effective:
            mask[turn.span[0] : turn.span[1]] = True
    return np.asarray(fields_["advantages"][seq], dtype=np.float64), mask


def _student_topk(fields_: dict[str, list], seq: int) -> StudentTopK | None:
    """The sequence's student top-K block (already checked by the contract validator), if any."""
    override = fields_["overrides"][seq] if "overrides" in fields_ else None
    if not isinstance(override, Mapping) or not isinstance(override.get(STUDENT_TOPK_KEY), dict):
        return None
    return parse_student_topk(override[STUDENT_TOPK_KEY])


def _as_trained(raw: Mapping[str, Any], fields_: dict[str, list], group: int) -> dict[str, Any]:
    """The group as the trainer will read it: a `dense_k1` sequence keeps only its teacher rows (the
    rest are copies of the student's own logprobs) and is then checked as `topk` rows with K = 1."""
    checked = dict(raw)
    overrides = fields_.get("overrides")
    if "distill_token_ids" not in fields_ or not overrides:
        return checked
    ids_all, lps_all, over_all = list(fields_["distill_token_ids"]), list(fields_["distill_logprobs"]), []
    for seq, override in enumerate(overrides):
        tokens = fields_["tokens"][seq]
        n = len(tokens) if isinstance(tokens, list) else 0
        keep = _dense_k1_teacher_positions(override, n, group, seq)
        if keep is None or not isinstance(ids_all[seq], list) or not isinstance(lps_all[seq], list):
            over_all.append(override)
            continue
        ids_all[seq] = [row if k else [] for row, k in zip(ids_all[seq], keep, strict=False)]
        lps_all[seq] = [row if k else [] for row, k in zip(lps_all[seq], keep, strict=False)]
        over_all.append({})
    checked.update(distill_token_ids=ids_all, distill_logprobs=lps_all, overrides=over_all)
    return checked


def _raise_first_violation(checked: dict[str, Any], group: int) -> None:
    """Run the contract validator (trainer mode) and raise its first violation."""
    violations = contract_violations(checked, group, require_provenance=False)
    if violations:
        first = violations[0]
        more = f" (and {len(violations) - 1} more)" if len(violations) > 1 else ""
        raise BatchValidationError(
            f"{first.message} [{first.kind}]{more}", group=group, sequence=first.seq, position=first.pos
        )


def validated_sequences(
    raw: Mapping[str, Any], group: int, options: CollateOptions
) -> list[ValidatedSequence]:
    """Every sequence of group `group`, validated; raises BatchValidationError on the first problem."""
    fields_ = _per_sequence_fields(raw, group)
    checked = _as_trained(raw, fields_, group)
    _raise_first_violation(checked, group)
    if "distill_token_ids" in fields_:  # the rows as trained: dense_k1 copies already dropped
        fields_ = {
            **fields_,
            "distill_token_ids": checked["distill_token_ids"],
            "distill_logprobs": checked["distill_logprobs"],
        }
    scores = _group_scores(fields_["scores"], group)
    group_adv = group_advantages(
        scores, eps=options.advantage_eps, normalize_std=options.normalize_advantage_std
    )
    return [
        _validate_sequence(fields_, seq, float(group_adv[seq]), float(scores[seq]), group, options)
        for seq in range(len(fields_["tokens"]))
    ]
