"""Entry K+1 (the appended student token): which bins the reference top-K loss uses, and what the
contract document says about it (docs/distill-format.md)."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
import torch

from trainer_adapters.losses import log_tail_mass, topk_kl

DOC = Path(__file__).resolve().parents[2] / "docs" / "distill-format.md"

# Full distributions over a 6-token vocabulary. K = 2: the teacher's top-2 are ids 0 and 1; the
# student's token is id 4, outside them, so the row gets it as entry K+1.
TEACHER = torch.tensor([0.5, 0.2, 0.1, 0.1, 0.06, 0.04])
STUDENT = torch.tensor([0.3, 0.1, 0.2, 0.1, 0.25, 0.05])
ROW = [0, 1, 4]


def _kl(p: list[float], q: list[float]) -> float:
    return sum(a * math.log(a / b) for a, b in zip(p, q, strict=True) if a > 0)


def test_reference_loss_uses_every_entry_plus_the_tail_of_all_entries():
    teacher = TEACHER[ROW].log()[None]
    student = STUDENT[ROW].log()[None]
    valid = torch.ones(1, 3, dtype=torch.bool)
    got = topk_kl(student, teacher, valid, direction="reverse").item()

    def bins(dist: torch.Tensor) -> list[float]:  # K+2 bins: ids 0, 1, 4 and everything else
        picked = dist[ROW].tolist()
        return [*picked, 1.0 - sum(picked)]

    assert sum(bins(STUDENT)) == pytest.approx(1.0) and sum(bins(TEACHER)) == pytest.approx(1.0)
    assert got == pytest.approx(_kl(bins(STUDENT), bins(TEACHER)), rel=1e-5)
    # The tail the reference computes is 1 - mass of all three entries, not of the first K.
    assert log_tail_mass(student, valid).exp().item() == pytest.approx(1 - (0.3 + 0.1 + 0.25), rel=1e-5)


def test_tail_of_the_first_k_plus_entry_k_plus_one_double_counts_the_student_token():
    """What a trainer following the old sentence ("the tail from the first K entries only") and
    also using entry K+1 as a bin would compute: its bins are not a distribution."""
    first_k_tail = 1.0 - float(STUDENT[[0, 1]].sum())
    bins = [*STUDENT[ROW].tolist(), first_k_tail]
    assert sum(bins) == pytest.approx(1.0 + float(STUDENT[4]))  # 1.25: the student token twice


def test_the_contract_states_the_role_of_entry_k_plus_one_and_the_bins():
    text = " ".join(DOC.read_text().split())
    assert "A trainer computing the tail mass still uses only the first K entries" not in text
    assert re.search(r"Entry K\+1 and the bins of a top-K loss", text)
    assert "take EVERY entry of the row as a bin" in text
    assert "1 minus the mass of all the row's entries, the K+1-th included" in text
    assert "`1 + p(student token)`" in text
