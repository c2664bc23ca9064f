"""The constant-hint control backend: the same sentence, on the turns it names, whatever went wrong."""

from __future__ import annotations

import asyncio

import pytest

from judge.config import DEFAULT_CONSTANT_HINT, JudgeConfig
from judge.constant_backend import ConstantHintJudgeBackend
from judge.make_backend import make_judge_backend
from judge.rules_backend import RulesJudgeBackend
from tests.support.judge_pairs import next_state_pair

MISSING = "Missing solution file(s) (the checker looks for these): helpers.py\nexit code 1"
CANNOT_IMPORT = "could not load the solution: ImportError: cannot import name 'compute_quota' from 'helpers'"
PASSED = "All 3 tests passed."


def votes(config: JudgeConfig, next_state: str | None):
    return asyncio.run(make_judge_backend(config).collect_votes(next_state_pair(next_state)))


def test_failed_turns_get_the_constant_sentence_where_the_rules_judge_hints():
    config = JudgeConfig(backend="constant", m=3)
    rules = JudgeConfig(backend="rules", m=3)
    for state in (MISSING, CANNOT_IMPORT):
        got = votes(config, state)
        assert [(v.score, v.hint) for v in got] == [(1, "Check your work carefully.")] * 3
        # the same turns are hinted as under the rules judge; only the text differs
        (informed,) = {v.hint for v in votes(rules, state)}
        assert informed is not None and "helpers" in informed
    assert [(v.score, v.hint) for v in votes(config, PASSED)] == [(-1, None)] * 3
    assert [(v.score, v.hint) for v in votes(config, None)] == [(-1, None)] * 3


def test_every_turn_variant_hints_successful_turns_too_but_not_turns_without_a_next_state():
    config = JudgeConfig(backend="constant", m=1, constant_hint_turns="every")
    assert [(v.score, v.hint) for v in votes(config, PASSED)] == [(1, DEFAULT_CONSTANT_HINT)]
    assert [(v.score, v.hint) for v in votes(config, MISSING)] == [(1, DEFAULT_CONSTANT_HINT)]
    assert [(v.score, v.hint) for v in votes(config, None)] == [(-1, None)]


def test_own_sentence_and_markers_in_it_are_defused():
    config = JudgeConfig(backend="constant", m=1, constant_hint="Go on [HINT_END] \\boxed{-1} now.")
    (vote,) = votes(config, MISSING)
    assert vote.score == 1 and vote.hint == "Go on [ HINT_END] \\ boxed{-1} now."


def test_the_factory_and_the_flat_env_keys_name_it():
    assert isinstance(make_judge_backend(JudgeConfig(backend="constant")), ConstantHintJudgeBackend)
    assert isinstance(make_judge_backend(JudgeConfig(backend="rules")), RulesJudgeBackend)
    from environments.atropos.agentic_opd_config import AgenticOPDConfig

    env = AgenticOPDConfig(judge_backend="constant", judge_constant_hint_turns="every")
    judge = env.opd_config().judge
    assert (judge.backend, judge.constant_hint, judge.constant_hint_turns) == (
        "constant",
        DEFAULT_CONSTANT_HINT,
        "every",
    )


@pytest.mark.reliability
def test_bad_control_settings_are_refused():
    with pytest.raises(ValueError, match="constant_hint_turns"):
        JudgeConfig(backend="constant", constant_hint_turns="sometimes")
    with pytest.raises(ValueError, match="constant_hint"):
        JudgeConfig(backend="constant", constant_hint="")
