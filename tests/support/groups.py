"""Realistic, contract-valid ScoredDataGroups for the tests (moved from tests/unit/test_distill_format.py)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
from hypothesis import strategies as st

from hermes_opd.contract.constants import MASKED, MODE_DENSE_K1, MODE_TOPK
from hermes_opd.contract.group_id import group_digest
from hermes_opd.contract.rows import empty_rows, make_opd_block, to_dense_k1
from hermes_opd.record.trajectory import PROMPT_LOGPROB
from scoring.teacher_rows import normalize_row, place_turn_rows

GROUP_SIZE = 2
"""Sequences per group in the send tests."""

VOCAB = 64
"""Token ids 0..63; `build_group` avoids id 0 for student tokens so zero padding is detectable."""


def _log_softmax(logits: np.ndarray) -> np.ndarray:
    shifted = logits - logits.max()
    return shifted - np.log(np.exp(shifted).sum())


def _teacher_row(rng: np.random.Generator, student_token: int, k: int) -> tuple[list[int], list[float]]:
    """A row as the env would build it from a vLLM prompt-logprobs dict (top-k + the actual token)."""
    logits = rng.normal(0.0, 2.0, VOCAB)
    logits[student_token] += rng.normal(4.0, 2.5)  # the teacher mostly, not always, agrees
    lps = _log_softmax(logits)
    order = np.argsort(-lps, kind="stable")
    candidate_ids = [int(i) for i in order[:k]]
    if student_token not in candidate_ids:
        candidate_ids.append(student_token)
    return normalize_row(candidate_ids, [float(lps[i]) for i in candidate_ids], student_token, None, k)


def _segment(rng: np.random.Generator, length: int) -> list[int]:
    return [int(t) for t in rng.integers(1, VOCAB, length)]


def build_sequence(rng: np.random.Generator, k: int, statuses: tuple[str, str, str]) -> dict:
    """One rollout: prompt, tool-call turn, tool output, answer turn, verifier message, final turn."""
    parts = [
        ("prompt", 12),
        ("turn", 9),
        ("tool", 10),
        ("turn", 7),
        ("user", 6),
        ("turn", 5),
    ]
    tokens: list[int] = []
    masks: list[int] = []
    inference: list[float] = []
    spans: list[tuple[int, int]] = []
    for kind, length in parts:
        segment = _segment(rng, length)
        start = len(tokens)
        tokens += segment
        if kind == "turn":
            masks += segment
            inference += [float(v) for v in -rng.exponential(0.7, length)]
            spans.append((start, start + length))
        else:
            masks += [MASKED] * length
            inference += [PROMPT_LOGPROB] * length
    messages = [
        {"role": "system", "content": "You are a careful coding agent."},
        {"role": "user", "content": "Fix the failing test in utils.py <please> & report."},
        {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "terminal"}}]},
        {"role": "tool", "name": "terminal", "content": "1 failed, 3 passed"},
        {"role": "assistant", "content": "Done: all tests pass."},
        {"role": "user", "content": "The verifier says 1 test still fails."},
        {"role": "assistant", "content": "I will look again."},
    ]
    ids_rows, lp_rows = empty_rows(len(tokens))
    turns = []
    for index, ((start, end), status, message_index, role) in enumerate(
        zip(spans, statuses, (2, 4, 6), ("tool", "user", None), strict=True)
    ):
        turn = {
            "span": [start, end],
            "message_index": message_index,
            "next_state_role": role,
            "status": status,
        }
        if status == "scored":
            replacement = _segment(rng, 4)  # the canonical re-encoding of tokens[10:11] + hint text
            turn |= {
                "hint": f"Hint {index}: run the tests before answering.",
                "votes": {"n": 3, "positive": 2, "negative": 1, "unparsed": 0, "policy": "majority"},
                "hint_insert_at": 11,
                "replaced_range": [10, 11],
                "replacement_ids": replacement,
                "teacher_prompt_len": start - 1 + len(replacement),
            }
            rows = [_teacher_row(rng, tokens[pos], k) for pos in range(start, end)]
            place_turn_rows(ids_rows, lp_rows, start, [r[0] for r in rows], [r[1] for r in rows])
        elif status == "no_hint":
            turn |= {"hint": None, "votes": {"n": 3, "positive": 0, "negative": 3, "unparsed": 0}}
        turns.append(turn)
    return {
        "tokens": tokens,
        "masks": masks,
        "inference_logprobs": inference,
        "distill_token_ids": ids_rows,
        "distill_logprobs": lp_rows,
        "messages": messages,
        "opd": make_opd_block(MODE_TOPK, k, spans, turns),
    }


def build_group(
    seed: int = 0,
    group_size: int = 3,
    k: int = 5,
    statuses: tuple[str, str, str] = ("scored", "scored", "no_next_state"),
) -> dict:
    """A contract-valid `topk` ScoredDataGroup dict (JSON-ready). Every third sequence gets no hint
    for its first turn."""
    rng = np.random.default_rng(seed)
    seqs = [
        build_sequence(rng, k, ("no_hint", "scored", "no_next_state") if seq % 3 == 2 else statuses)
        for seq in range(group_size)
    ]
    return {
        "tokens": [s["tokens"] for s in seqs],
        "masks": [s["masks"] for s in seqs],
        "scores": [float(i % 2) for i in range(group_size)],
        "inference_logprobs": [s["inference_logprobs"] for s in seqs],
        "distill_token_ids": [s["distill_token_ids"] for s in seqs],
        "distill_logprobs": [s["distill_logprobs"] for s in seqs],
        "messages": [s["messages"] for s in seqs],
        "overrides": [{"opd": s["opd"]} for s in seqs],
        "group_overrides": {},
    }


def to_dense_group(group: dict) -> dict:
    """The same group in `dense_k1` mode."""
    dense = copy.deepcopy(group)
    for seq in range(len(group["tokens"])):
        ids, lps = to_dense_k1(
            group["tokens"][seq],
            group["masks"][seq],
            group["inference_logprobs"][seq],
            group["distill_token_ids"][seq],
            group["distill_logprobs"][seq],
        )
        dense["distill_token_ids"][seq] = ids
        dense["distill_logprobs"][seq] = lps
        dense["overrides"][seq]["opd"]["mode"] = MODE_DENSE_K1
    return dense


@st.composite
def teacher_distribution(draw, student: int | None = None):
    """vLLM-like input: a distribution over distinct ids (the student's token included), of which
    the top-m are passed as candidates in shuffled order, plus the student's own logprob."""
    size = draw(st.integers(1, 40))
    ids = draw(st.lists(st.integers(0, 10_000), min_size=size, max_size=size, unique=True))
    if student is not None and student not in ids:
        ids[draw(st.integers(0, size - 1))] = student
    student = ids[draw(st.integers(0, size - 1))] if student is None else student
    logits = np.array(draw(st.lists(st.floats(-30, 30, width=32), min_size=size, max_size=size)))
    lps = _log_softmax(logits).tolist()
    ranked = sorted(range(size), key=lambda i: -lps[i])[: draw(st.integers(1, size))]
    shuffled = draw(st.permutations(ranked))
    return [ids[i] for i in shuffled], [lps[i] for i in shuffled], student, lps[ids.index(student)]


def _scored_turn(start: int, end: int) -> dict:
    return {
        "span": [start, end],
        "message_index": 2,
        "status": "scored",
        "next_state_role": "tool",
        "hint": "check the output",
        "votes": {"n": 1, "positive": 1},
        "hint_insert_at": 0,
        "replaced_range": [0, 0],
        "replacement_ids": [1, 2],
        "teacher_prompt_len": start + 2,
    }


@st.composite
def packed_sequences(draw):
    """A sequence with random generated spans and random teacher candidates in scored turns."""
    prompt = draw(st.integers(1, 6))
    n_turns = draw(st.integers(1, 3))
    k = draw(st.integers(1, 6))
    tokens, masks, inference, spans = [], [], [], []
    for _ in range(n_turns):
        gap = draw(st.lists(st.integers(0, 500), min_size=prompt, max_size=prompt))
        tokens += gap
        masks += [MASKED] * len(gap)
        inference += [PROMPT_LOGPROB] * len(gap)
        turn = draw(st.lists(st.integers(0, 500), min_size=1, max_size=6))
        spans.append((len(tokens), len(tokens) + len(turn)))
        tokens += turn
        masks += turn
        inference += draw(st.lists(st.floats(-20, 0), min_size=len(turn), max_size=len(turn)))
    ids_rows, lp_rows = empty_rows(len(tokens))
    turns = []
    for index, (start, end) in enumerate(spans):
        scored = draw(st.booleans())
        turn = {"span": [start, end], "message_index": 2 * index + 2, "status": "skipped"}
        if scored:
            turn = _scored_turn(start, end)
            row_ids, row_lps = [], []
            for pos in range(start, end):
                ids, lps, student, student_lp = draw(teacher_distribution(student=tokens[pos]))
                ids, lps = normalize_row(ids, lps, student, student_lp, k)
                row_ids.append(ids)
                row_lps.append(lps)
            place_turn_rows(ids_rows, lp_rows, start, row_ids, row_lps)
        turns.append(turn)
    return {
        "tokens": [tokens],
        "masks": [masks],
        "scores": [0.0],
        "inference_logprobs": [inference],
        "distill_token_ids": [ids_rows],
        "distill_logprobs": [lp_rows],
        "overrides": [{"opd": make_opd_block(MODE_TOPK, k, spans, turns)}],
    }


def write_groups(path: Path, groups: list[dict]) -> list[str]:
    """Write `groups` as `hermes-opd process` does; return their ids."""
    with path.open("w") as handle:
        for index, group in enumerate(groups):
            handle.write(json.dumps({"group_index": index, "task_id": f"t{index}", **group}) + "\n")
    return [group_digest(group) for group in groups]
