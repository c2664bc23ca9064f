"""Total = w_grpo * L_grpo + w_prm * L_prm + w_opd * L_opd, each term on its own, in BOTH trainers
(the torch trainer and the tinker adapter), against a hand computation to 1e-6.

The hand computation uses only the student's logprobs of the sampled tokens (read off the same
policy) and Python floats: per generated token the ratio r = exp(lp - lp_sampler); GRPO
min(r A, clip(r, 1 - 0.2, 1 + 0.2) A) with the group advantage A = (score - mean) / (std + 1e-6);
PRM min(r s, clip(r, 1 - prm_clip_low, 1 + prm_clip_high) s) with the turn's score s over the
effective turns' tokens; OPD (token mode) -clip(q - lp, -5, 5) * lp at the teacher positions; each a
token mean over its own positions."""

from __future__ import annotations

import math

import pytest
import torch

from hermes_opd.contract.process_reward import ProcessTurn, make_prm_block, process_advantages
from tests.support.fake_tinker import FakeTinkerService, LogitTable, V, _tinker_config
from trainer_adapters.tinker_adapter import TinkerOPDTrainer
from trainer_adapters.trainer_config import parse_trainer_config

TOKENS = ([3, 7, 11, 5, 20, 9, 2, 14, 30], [4, 8, 12, 6, 21, 10, 1, 15, 31])
SPANS = ((3, 6), (7, 9))
GENERATED = [3, 4, 5, 7, 8]
RATIOS = ([1.3, 0.9, 1.0, 0.7, 1.25], [1.1, 0.75, 1.35, 1.0, 0.95])
PRM_TURNS = (
    [ProcessTurn(SPANS[0], "scored", -1, True, {"n": 3}), ProcessTurn(SPANS[1], "scored", 1, True, {"n": 3})],
    [ProcessTurn(SPANS[0], "scored", 0, True, {"n": 3}), ProcessTurn(SPANS[1], "no_next_state")],
)  # the second session's 0 turn is its "at least one effective sample"
TEACHER = ({3: -0.3, 4: -2.0}, {7: -0.1, 8: -1.2})
"""Teacher logprob of the student's token at the positions with a teacher row."""
SCORES = [1.0, 0.0]
LOSS = {
    "w_grpo": 0.7,
    "w_prm": 1.3,
    "w_opd": 0.4,
    "opd_mode": "token",
    "prm_clip_low": 0.2,
    "prm_clip_high": 0.28,
}


def student_logprobs(logits_of) -> list[dict[int, float]]:
    """log p(tokens[pos] | tokens[:pos]) at every generated position of each sequence."""
    out = []
    with torch.no_grad():
        for tokens in TOKENS:
            lp = torch.log_softmax(logits_of(tokens[:-1]).float(), -1)
            out.append({pos: float(lp[pos - 1, tokens[pos]]) for pos in GENERATED})
    return out


def make_group(lps: list[dict[int, float]]) -> dict:
    masks, inference, ids_rows, lp_rows, advantages, overrides = [], [], [], [], [], []
    for seq, tokens in enumerate(TOKENS):
        masks.append([t if p in GENERATED else -100 for p, t in enumerate(tokens)])
        ratio = dict(zip(GENERATED, RATIOS[seq], strict=True))
        inference.append(
            [lps[seq][p] - math.log(ratio[p]) if p in GENERATED else 1.0 for p in range(len(tokens))]
        )
        ids_rows.append([[tokens[p]] if p in TEACHER[seq] else [] for p in range(len(tokens))])
        lp_rows.append([[TEACHER[seq][p]] if p in TEACHER[seq] else [] for p in range(len(tokens))])
        advantages.append(process_advantages(len(tokens), PRM_TURNS[seq]))
        block = make_prm_block(PRM_TURNS[seq], m=3, backend="rules", at_least_one_effective=True)
        overrides.append({"turn_spans": [list(s) for s in SPANS], "prm": block})
    return {
        "tokens": [list(t) for t in TOKENS],
        "masks": masks,
        "scores": SCORES,
        "inference_logprobs": inference,
        "advantages": advantages,
        "distill_token_ids": ids_rows,
        "distill_logprobs": lp_rows,
        "overrides": overrides,
    }


def ppo(r: float, a: float, low: float, high: float) -> float:
    return min(r * a, min(max(r, 1 - low), 1 + high) * a)


def by_hand(lps: list[dict[int, float]], w_grpo: float, w_prm: float, w_opd: float) -> dict[str, float]:
    mean = sum(SCORES) / 2
    std = math.sqrt(sum((s - mean) ** 2 for s in SCORES) / 2)
    grpo = prm = opd = 0.0
    n_gen = n_prm = n_teacher = 0
    for seq in range(2):
        group_adv = (SCORES[seq] - mean) / (std + 1e-6)
        for j, pos in enumerate(GENERATED):
            r = RATIOS[seq][j]
            grpo += ppo(r, group_adv, 0.2, 0.2)
            n_gen += 1
            turn = next(t for t in PRM_TURNS[seq] if t.span[0] <= pos < t.span[1])
            if turn.effective:
                prm += ppo(r, float(turn.score), 0.2, 0.28)
                n_prm += 1
            if pos in TEACHER[seq]:
                gap = max(-5.0, min(5.0, TEACHER[seq][pos] - lps[seq][pos]))
                opd += gap * lps[seq][pos]
                n_teacher += 1
    terms = {"grpo": -grpo / n_gen, "prm": -prm / n_prm, "opd": -opd / n_teacher}
    terms["total"] = w_grpo * terms["grpo"] + w_prm * terms["prm"] + w_opd * terms["opd"]
    return terms


WEIGHTS = [(0.7, 1.3, 0.4), (0.0, 1.0, 1.0), (1.0, 0.0, 0.0), (0.0, 1.0, 0.0)]
"""Three terms; combined mode (PRM + OPD, as in openclaw-combine); GRPO alone; PRM alone."""


def _assert_terms(metrics: dict[str, float], want: dict[str, float]) -> None:
    for name in ("grpo", "prm", "opd", "total"):
        assert metrics[f"loss/{name}"] == pytest.approx(want[name], abs=1e-6), name


def test_the_hand_computation_by_hand():
    """The PRM term spelled out: seq 0's turn [3, 6) scored -1 at ratios 1.3, 0.9, 1.0 and turn
    [7, 9) scored +1 at 0.7, 1.25; seq 1's promoted 0 turn adds 3 positions and nothing else."""
    lps = [dict.fromkeys(GENERATED, -1.0)] * 2
    want = by_hand(lps, 0.0, 1.0, 0.0)
    objective = -1.3 + -0.9 + -1.0 + 0.7 + 1.25  # -1 * max(r, clip(r)) picks the larger ratio: 1.3, 0.9, 1.0
    assert want["prm"] == pytest.approx(-objective / 8, abs=1e-12)
    assert want["total"] == want["prm"]
    assert min(abs(v) for v in by_hand(lps, *WEIGHTS[0]).values()) > 1e-3  # every term is non-zero


@pytest.mark.parametrize("weights", WEIGHTS)
def test_tinker_adapter_runs_the_three_term_objective(weights):
    table = LogitTable(seed=11)
    lps = student_logprobs(table)
    w_grpo, w_prm, w_opd = weights
    config = _tinker_config(**{**LOSS, "w_grpo": w_grpo, "w_prm": w_prm, "w_opd": w_opd})
    service = FakeTinkerService(table)
    metrics = TinkerOPDTrainer(config, service).train_step([make_group(lps)])
    want = by_hand(lps, *weights)
    _assert_terms(metrics, want)
    assert service.loss_sum == pytest.approx(want["total"], abs=1e-6)
    assert metrics["prm/positive_frac"] == pytest.approx(2 / 8, abs=1e-6)
    assert metrics["prm/negative_frac"] == pytest.approx(3 / 8, abs=1e-6)


@pytest.mark.parametrize("weights", WEIGHTS[:2])
def test_torch_trainer_runs_the_three_term_objective(weights, tmp_path):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from trainer_adapters.torch_trainer import TorchTrainer

    torch.manual_seed(0)
    Qwen2ForCausalLM(
        Qwen2Config(
            vocab_size=V,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=1,
            max_position_embeddings=64,
        )
    ).save_pretrained(tmp_path / "tiny")
    w_grpo, w_prm, w_opd = weights
    trainer = TorchTrainer(
        parse_trainer_config(
            {
                "model": {"path": str(tmp_path / "tiny"), "device": "cpu", "dtype": "float32"},
                "optim": {"micro_batch_size": 1},  # the step's token counts span the micro-batches
                "loss": {**LOSS, "w_grpo": w_grpo, "w_prm": w_prm, "w_opd": w_opd},
                "checkpoint": {"dir": str(tmp_path / "ckpt"), "resume": False},
                "logging": {"metrics_path": None, "stdout": False},
            }
        )
    )
    trainer.model.eval()
    lps = student_logprobs(lambda ids: trainer.model(input_ids=torch.tensor([ids])).logits[0])
    metrics = trainer.accumulate_gradients([make_group(lps)])
    _assert_terms(metrics, by_hand(lps, *weights))
