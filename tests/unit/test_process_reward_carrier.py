"""The per-turn process reward as Atropos data: `advantages` over each effective turn's span, the
`overrides[seq]["prm"]` block, the validator's checks of both, and the pipeline and group builder
that emit them (PRM judge on, rules backend, the dev tokenizer's exact trajectories)."""

from __future__ import annotations

import asyncio
import copy

import pytest

from environments.delivery.group_builder import FinishedRollout, build_group, has_distill_signal
from environments.pipeline.build import build_opd_pipeline
from environments.pipeline.opd_config import OPDConfig, PRMConfig
from environments.pipeline.opd_metrics import group_metrics
from hermes_opd.bench.synth import SynthSpec, synth_group
from hermes_opd.contract.errors import ConfigError
from hermes_opd.contract.process_reward import (
    ProcessTurn,
    make_prm_block,
    mark_effective,
    process_advantages,
)
from hermes_opd.contract.validation import PROCESS_REWARD, validate_group
from judge.config import JudgeConfig
from judge.prm_rules_backend import ProcessRulesBackend


@pytest.mark.parametrize(
    ("scores", "at_least_one", "already", "effective"),
    [
        ((0, 0, -1), True, False, [True, False, True]),
        ((0, 0, -1), False, False, [False, False, True]),
        ((None, 0, 0), True, False, [False, True, False]),
        ((0, 1, 0), True, True, [False, True, False]),  # an earlier sequence of the session was effective
        ((1, 0, 0), True, False, [True, False, False]),
        ((None, None), True, False, [False, False]),
    ],
)
def test_mark_effective_keeps_at_least_one_sample_per_session(scores, at_least_one, already, effective):
    assert mark_effective(scores, at_least_one=at_least_one, already_effective=already) == effective


def test_carrier_is_the_score_over_effective_spans_and_zero_elsewhere():
    turns = [
        ProcessTurn((2, 4), "scored", -1, True, {"n": 3}),
        ProcessTurn((5, 7), "scored", 0, True, {"n": 3}),
        ProcessTurn((8, 9), "scored", 1, True, {"n": 3}),
        ProcessTurn((9, 10), "no_next_state"),
    ]
    assert process_advantages(11, turns) == [0.0, 0.0, -1.0, -1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0]


def _group_with_prm() -> dict:
    """One sequence: 3 prompt tokens, turn [3, 6) scored -1, turn [7, 9) no next state."""
    tokens = [1, 2, 3, 10, 11, 12, 4, 13, 14]
    masks = [-100, -100, -100, 10, 11, 12, -100, 13, 14]
    turns = [ProcessTurn((3, 6), "scored", -1, True, {"n": 3}), ProcessTurn((7, 9), "no_next_state")]
    return {
        "tokens": [tokens],
        "masks": [masks],
        "scores": [0.0],
        "advantages": [process_advantages(len(tokens), turns)],
        "overrides": [
            {
                "turn_spans": [[3, 6], [7, 9]],
                "prm": make_prm_block(turns, m=3, backend="rules", at_least_one_effective=True),
            }
        ],
    }


def _prm_violations(group: dict) -> list[tuple[int | None, int | None, str]]:
    return [
        (v.seq, v.pos, v.message)
        for v in validate_group(group, require_provenance=False)
        if v.kind == PROCESS_REWARD
    ]


def test_validator_accepts_the_carrier():
    assert _prm_violations(_group_with_prm()) == []


def _break(path: str, value) -> dict:
    group = _group_with_prm()
    target = group
    *keys, last = path.split(".")
    for key in keys:
        target = target[int(key)] if key.isdigit() else target[key]
    target[int(last) if last.isdigit() else last] = value
    return group


@pytest.mark.parametrize(
    ("path", "value", "expected"),
    [
        ("advantages.0.4", 1.0, [(0, 4, "advantages[4] is 1.0; the PRM carrier says -1.0")]),
        ("advantages.0.7", -1.0, [(0, 7, "advantages[7] is -1.0; the PRM carrier says 0.0")]),
        (
            "advantages.0",
            [0.0] * 3,
            [(0, None, "advantages must be a list of 9 numbers (the PRM carrier), got 3")],
        ),
        (
            "overrides.0.prm.turns.0.effective",
            False,
            [(0, None, "prm.turns[0] has score -1 and is not effective (a non-zero score always is)")],
        ),
        (
            "overrides.0.prm.turns.1.score",
            1,
            [(0, None, "prm.turns[1] has status no_next_state but score 1 / effective False")],
        ),
        ("overrides.0.prm.turns.0.score", 2, [(0, None, "prm.turns[0].score 2 is not -1, 0 or 1")]),
        (
            "overrides.0.prm.turns.0.status",
            "maybe",
            [
                (
                    0,
                    None,
                    "prm.turns[0].status 'maybe' is not one of scored, no_next_state, judge_error, skipped",
                )
            ],
        ),
        ("overrides.0.prm.carrier", "scores", [(0, None, "prm.carrier 'scores' is not 'advantages'")]),
        (
            "overrides.0.prm.turns.0.span",
            [2, 6],
            [
                (0, None, "prm.turns spans [[2, 6], [7, 9]] differ from turn_spans"),
                (0, 2, "prm turn span [2, 6] covers a position the policy did not generate"),
                (0, 2, "advantages[2] is 0.0; the PRM carrier says -1.0"),
            ],
        ),
    ],
)
def test_validator_reports_each_break_of_the_carrier(path, value, expected):
    assert _prm_violations(_break(path, value)) == expected


def test_advantages_without_a_prm_block_break_only_our_own_output():
    group = _group_with_prm()
    del group["overrides"][0]["prm"]
    assert _prm_violations(group) == []  # a trainer reads other envs' advantages as they are
    strict = [v for v in validate_group(group) if v.kind == PROCESS_REWARD]
    assert [(v.seq, v.message) for v in strict] == [
        (0, "advantages without overrides[seq]['prm'] saying what they carry")
    ]


# -- the pipeline and the group builder -----------------------------------------------------------------
TOOL_STATES = [
    "Traceback (most recent call last):\nNameError: name 'x' is not defined\nexit code 1",
    "wrote helpers.py\nexit code 0",
]


def _trajectories(tokenizer, feedback: list[str], tool_states: list[str] = TOOL_STATES):
    trajectories = synth_group(
        tokenizer,
        SynthSpec(rollouts=len(feedback), turns=3, prompt_tokens=48, turn_tokens=16, state_tokens=16),
    )
    for trajectory, last in zip(trajectories, feedback, strict=True):
        tools = [m for m in trajectory.messages if m["role"] == "tool"]
        for message, text in zip(tools, tool_states, strict=True):
            message["content"] = text  # what the judge reads; the token record is untouched
        trajectory.messages[-1]["content"] = last
    return trajectories


def _prm_config(**prm) -> OPDConfig:
    judge = JudgeConfig(backend="rules", m=3)
    return OPDConfig(enabled=False, judge=judge, prm=PRMConfig(enabled=True, judge=judge, **prm))


async def _distills(tokenizer, config: OPDConfig, feedback: list[str], tool_states=TOOL_STATES):
    trajectories = _trajectories(tokenizer, feedback, tool_states)
    pipeline = await build_opd_pipeline(tokenizer, config, None, None)  # the process judge alone
    distills = [await pipeline.process(t) for t in trajectories]
    await pipeline.aclose()
    return trajectories, distills


async def _groups(tokenizer, config: OPDConfig, feedback: list[str], tool_states=TOOL_STATES) -> dict:
    trajectories, distills = await _distills(tokenizer, config, feedback, tool_states)
    rollouts = [FinishedRollout(t, 0.5, d, {}) for t, d in zip(trajectories, distills, strict=True)]
    return build_group(rollouts, include_messages=True, opd=config)


def test_group_builder_emits_a_process_reward_per_turn(dev_tokenizer):
    feedback = ["Thanks, that works.", "No, I meant a function called make_slug."]
    group = asyncio.run(_groups(dev_tokenizer, _prm_config(), feedback))
    assert validate_group(group) == []
    for seq, last_score in enumerate((1, -1)):
        block = group["overrides"][seq]["prm"]
        spans = group["overrides"][seq]["turn_spans"]
        assert [(t["span"], t["status"], t["score"], t["effective"]) for t in block["turns"]] == [
            (spans[0], "scored", -1, True),  # the traceback
            (spans[1], "scored", 0, False),  # a clean tool output; the session is already effective
            (spans[2], "scored", last_score, True),  # the user's word
        ]
        assert block["turns"][0]["votes"]["negative"] == 3 and block["turns"][0]["votes"]["requested"] == 3
        assert (block["version"], block["carrier"], block["m"], block["backend"]) == (
            1,
            "advantages",
            3,
            "rules",
        )
        expected = [0.0] * len(group["tokens"][seq])
        for (start, end), score in ((spans[0], -1.0), (spans[2], float(last_score))):
            expected[start:end] = [score] * (end - start)
        assert group["advantages"][seq] == expected
        assert [t["status"] for t in group["overrides"][seq]["opd"]["turns"]] == ["skipped"] * 3
    assert group["scores"] == [0.5, 0.5] and has_distill_signal(group)  # equal scores, PRM still trains


def test_a_session_without_signal_keeps_one_effective_turn_unless_told_not_to(dev_tokenizer):
    clean = ["wrote helpers.py\nexit code 0", "ran it\nexit code 0"]
    for at_least_one, effective in ((True, [True, False, False]), (False, [False, False, False])):
        config = _prm_config(at_least_one_effective=at_least_one)
        group = asyncio.run(_groups(dev_tokenizer, config, ["Now write the tests for it."], clean))
        turns = group["overrides"][0]["prm"]["turns"]
        assert [(t["score"], t["effective"]) for t in turns] == [(0, e) for e in effective]
        assert group["overrides"][0]["prm"]["at_least_one_effective"] is at_least_one
        assert set(group["advantages"][0]) == {0.0} and validate_group(group) == []
        assert has_distill_signal(group) is False  # a 0 turn adds tokens to the mean, no gradient


def test_group_metrics_report_the_process_reward_only_when_it_is_on(dev_tokenizer):
    feedback = ["Thanks, that works.", "No, I meant a function called make_slug."]
    _, distills = asyncio.run(_distills(dev_tokenizer, _prm_config(), feedback))
    metrics = group_metrics(distills)
    prm = {k: v for k, v in metrics.items() if k.startswith("prm/") and "latency" not in k}
    assert prm == {
        "prm/turns": 6,
        "prm/turns_scored": 6,
        "prm/turns_no_next_state": 0,
        "prm/turns_judge_error": 0,
        "prm/turns_skipped": 0,
        "prm/score_mean": pytest.approx(-1 / 3),
        "prm/scored_positive_frac": 1 / 6,
        "prm/scored_negative_frac": 3 / 6,
        "prm/scored_zero_frac": 2 / 6,
        "prm/effective_turns": 4,
        "prm/tie_frac": 0.0,
    }
    for distill in distills:
        distill.prm = None
    assert not any(k.startswith("prm/") for k in group_metrics(distills))


def test_prm_off_leaves_the_group_as_it_was(dev_tokenizer):
    trajectories = _trajectories(dev_tokenizer, ["Thanks!"])
    config = OPDConfig(enabled=False)
    rollouts = [FinishedRollout(copy.deepcopy(trajectories[0]), 1.0, None, {})]
    group = build_group(rollouts, include_messages=False, opd=config)
    assert group["advantages"] is None and "prm" not in group["overrides"][0]
    prm_on = build_group(rollouts, include_messages=False, opd=_prm_config())
    assert [t["status"] for t in prm_on["overrides"][0]["prm"]["turns"]] == ["skipped"] * 3
    assert prm_on["advantages"] == [[0.0] * len(group["tokens"][0])]
    assert validate_group(prm_on) == []


def test_the_builder_makes_no_hint_judge_or_teacher_for_the_process_reward_alone(dev_tokenizer):
    pipeline = asyncio.run(build_opd_pipeline(dev_tokenizer, _prm_config(), None, None))
    assert pipeline.judge is None and pipeline.teacher is None
    assert isinstance(pipeline.prm_judge, ProcessRulesBackend)


def test_the_builder_refuses_opd_without_a_teacher_server(dev_tokenizer):
    with pytest.raises(ConfigError, match="teacher server"):
        asyncio.run(
            build_opd_pipeline(dev_tokenizer, OPDConfig(judge=JudgeConfig(backend="rules")), None, None)
        )


def test_a_vote_policy_without_a_score_is_refused_at_config_time():
    with pytest.raises(ValueError, match="prm judge vote_policy 'any' does not decide a"):
        PRMConfig(judge=JudgeConfig(vote_policy="any"))
