"""Did the served policy move towards the teacher? A probe through vLLM itself (the bench's
`--quick` direction, docs/notes/learning-lab.md).

On the groups the start policy sampled (policy version 0), at every position the teacher scored,
it compares the teacher's logprob of the student's own token (from the group's distill rows: the
policy WITH the hint) with the served policy's logprob of that token WITHOUT the hint (vLLM prompt
logprobs under the base model, then under the run's final adapter). OPD trains exactly this gap
down, so its mean absolute value should fall; because the probe reads the adapter from vLLM, it
also fails when weight sync did not deliver the new weights. It is measured on training groups,
not held-out tasks.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from typing import Any

import httpx

from hermes_opd.contract.policy_version import POLICY_VERSION_KEY


def scored_positions(group: dict[str, Any], seq: int) -> list[tuple[int, float]]:
    """(position, teacher logprob of the student's token) at every position with a teacher row."""
    tokens = group["tokens"][seq]
    ids_rows = (group.get("distill_token_ids") or [None] * len(group["tokens"]))[seq] or []
    lp_rows = (group.get("distill_logprobs") or [None] * len(group["tokens"]))[seq] or []
    out = []
    for position, (ids, lps) in enumerate(zip(ids_rows, lp_rows, strict=False)):
        if ids and tokens[position] in ids:
            out.append((position, float(lps[ids.index(tokens[position])])))
    return out


def served_token_logprobs(
    http: httpx.Client, root_url: str, model: str, tokens: list[int]
) -> list[float | None]:
    """The served model's logprob of every prompt token given the ones before it (None at 0)."""
    body = {"model": model, "prompt": tokens, "max_tokens": 1, "temperature": 0.0, "prompt_logprobs": 0}
    response = http.post(f"{root_url}/v1/completions", json=body)
    response.raise_for_status()
    entries = response.json()["choices"][0]["prompt_logprobs"]
    return [
        None if entry is None else float(entry[str(token)]["logprob"])
        for entry, token in zip(entries, tokens, strict=True)
    ]


def teacher_gap(root_url: str, model: str, groups: Iterable[dict[str, Any]]) -> tuple[float | None, int]:
    """Mean |teacher_lp - served_lp| of the student's tokens over all scored positions, and their count."""
    gaps: list[float] = []
    with httpx.Client(timeout=120) as http:
        for group in groups:
            for seq, tokens in enumerate(group["tokens"]):
                positions = scored_positions(group, seq)
                if not positions:
                    continue
                served = served_token_logprobs(http, root_url, model, list(tokens))
                gaps.extend(abs(teacher - served[p]) for p, teacher in positions if served[p] is not None)
    return (statistics.fmean(gaps) if gaps else None), len(gaps)


def first_groups(groups: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The groups the start policy (version 0) sampled."""
    return [g for g in groups if (g.get("group_overrides") or {}).get(POLICY_VERSION_KEY, 0) == 0]


def probe_run(
    root_url: str, base_model: str, final_adapter: str | None, groups: list[dict[str, Any]]
) -> dict[str, Any]:
    """The gap under the base model and under the final adapter, on all first groups and on those
    whose scores are all equal (where GRPO has no signal)."""
    first = first_groups(groups)
    equal = [g for g in first if len(set(g["scores"])) == 1]
    result: dict[str, Any] = {"probe_groups": len(first), "probe_equal_score_groups": len(equal)}
    for name, subset in (("all", first), ("equal_score", equal)):
        start, positions = teacher_gap(root_url, base_model, subset)
        end = teacher_gap(root_url, final_adapter, subset)[0] if final_adapter else None
        result[f"teacher_gap_{name}_start"] = start
        result[f"teacher_gap_{name}_end"] = end
        result[f"teacher_gap_{name}_positions"] = positions
    return result
