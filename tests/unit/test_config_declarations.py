"""One source of truth for config: every OPD knob of the flat Atropos config is derived from its one
declaration in `OPDConfig`/`JudgeConfig`/`TeacherConfig` (default, bounds, description), and each
flat value lands unchanged in the nested config (no unit bridges)."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, Field

from environments.atropos.agentic_opd_config import OPD_GROUPS, AgenticOPDConfig, _EnvKnobs
from environments.pipeline.flat_fields import FlatGroup, flat_fields, nest_values
from environments.pipeline.opd_config import OPDConfig, TeacherConfig
from judge.config import JudgeConfig


def _declared(group: FlatGroup):
    for field in group.fields():
        yield group.flat_name(field), group.model.model_fields[field]


def test_flat_opd_knobs_are_copies_of_their_declarations():
    count = 0
    for group in OPD_GROUPS:
        for flat_name, nested in _declared(group):
            flat = AgenticOPDConfig.model_fields[flat_name]
            assert (flat.default, flat.metadata, flat.description, flat.annotation) == (
                nested.default,
                nested.metadata,
                nested.description,
                nested.annotation,
            ), flat_name
            count += 1
    assert count == len(flat_fields(OPD_GROUPS)) >= 30


def test_env_knobs_and_opd_knobs_do_not_overlap():
    assert set(_EnvKnobs.model_fields) & set(flat_fields(OPD_GROUPS)) == set()


def test_each_timeout_has_one_meaning_and_no_bridge():
    config = AgenticOPDConfig(
        tokenizer_name="x",
        judge_timeout_s=7.0,
        judge_turn_deadline_s=20.0,
        teacher_timeout_s=9.0,
        judge_votes=5,
    )
    opd = config.opd_config()
    assert (opd.judge.timeout_s, opd.judge.turn_deadline_s, opd.teacher.timeout_s, opd.judge.m) == (
        7.0,
        20.0,
        9.0,
        5,
    )
    assert "judge_timeout_s" not in OPDConfig.model_fields  # the per-turn limit is the judge's deadline


def test_defaults_agree_with_the_nested_models():
    assert AgenticOPDConfig(tokenizer_name="x").opd_config() == OPDConfig(
        judge=JudgeConfig(), teacher=TeacherConfig()
    )


def test_bounds_come_from_the_declaration():
    with pytest.raises(ValueError, match="judge_votes"):
        AgenticOPDConfig(tokenizer_name="x", judge_votes=33)  # JudgeConfig.m: le=32


def test_secrets_are_not_flat_knobs():
    assert "judge_api_key" not in AgenticOPDConfig.model_fields
    assert "teacher_api_key" not in AgenticOPDConfig.model_fields
    assert "judge_api_key_env" in AgenticOPDConfig.model_fields


def test_a_flat_name_declared_twice_is_refused():
    class A(BaseModel):
        size: int = Field(default=1, description="a")

    class B(BaseModel):
        a_size: int = Field(default=2, description="b")

    with pytest.raises(ValueError, match="'a_size' is declared twice"):
        flat_fields([FlatGroup(A, prefix="a_"), FlatGroup(B)])


def test_nest_values_builds_the_nested_model():
    class Inner(BaseModel):
        k: int = 1

    class Outer(BaseModel):
        x: int = 0
        inner: Inner = Field(default_factory=Inner)

    groups = [FlatGroup(Outer), FlatGroup(Inner, path=("inner",), prefix="inner_")]
    assert nest_values(Outer, groups, {"x": 3, "inner_k": 4}) == Outer(x=3, inner=Inner(k=4))


def test_nested_validators_run_when_the_flat_config_is_built():
    with pytest.raises(ValueError, match="quorum"):
        AgenticOPDConfig(tokenizer_name="x", judge_votes=3, judge_quorum=4)
