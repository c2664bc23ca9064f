"""The copy recipe for the learnable dev student (hermes_opd/learning_study/student_recipe.py): its rows (the
verbatim encoding, induction targets, pseudo-words that never hit a convention value), its schedule,
and a deterministic, seeded build that continues every phase from the last one's weights."""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import replace

import pytest

from environments.atropos.agentic_opd_config import AgenticOPDConfig
from environments.rollout.tools import TOOL_SCHEMAS
from environments.tasks.conventions import convention_values
from hermes_opd.devkit.dev_model import DevModelSpec, dev_tokenizer
from hermes_opd.learning_study.student_model import StudentSpec, is_student_built, weights_sha256
from hermes_opd.learning_study.student_recipe import (
    COPY_RECIPE,
    Phase,
    build_corrections_student,
    build_recipe_student,
    corrections_manifest,
    recipe_corpus,
    recipe_manifest,
)

SYSTEM_PROMPT = AgenticOPDConfig.model_fields["system_prompt"].default
TINY_SHAPE = StudentSpec(hidden_size=32, intermediate_size=64, num_layers=1, num_heads=1, num_kv_heads=1)
TINY_RECIPE = (
    Phase("induction", steps=2, induct=4, induct_len=6, warmup_steps=1),
    Phase(
        "mix", steps=2, conv=1, choice=2, drill=2, induct=2, pseudo=50, verbatim=True, seed=1, warmup_steps=1
    ),
)


@pytest.fixture(scope="module")
def corpus():
    phase = Phase("t", steps=1, induct=1, induct_len=8, pseudo=50, verbatim=True)
    return recipe_corpus(
        dev_tokenizer(DevModelSpec()), TOOL_SCHEMAS, SYSTEM_PROMPT, frozenset(convention_values()), phase
    )


def test_verbatim_writes_the_backtick_tokens_after_def_and_the_same_text(corpus):
    messages = [
        {"role": "user", "content": "Name it `compute_mileage`."},
        {"role": "assistant", "content": "def compute_mileage(x):\n    return x\n"},
    ]
    ids = corpus.encode(messages, None)
    tok = corpus.tok
    canonical = tok.apply_chat_template(messages, tokenize=False)
    assert tok.decode(ids) == canonical
    name = tok.encode("compute_mileage", add_special_tokens=False)
    def_at = max(i for i, t in enumerate(ids) if tok.convert_ids_to_tokens(t) == "def")
    assert ids[def_at + 1 : def_at + 2 + len(name)] == [corpus.space, *name]
    assert tok.encode(canonical, add_special_tokens=False) != ids  # canonical BPE writes `Ġcompute`


def test_induction_rows_target_exactly_the_second_copy(corpus):
    corpus.rng = random.Random(3)
    for ids, mask in corpus.induction_rows(20):
        targets = [t for t, m in zip(ids, mask, strict=True) if m]
        length = len(targets) + 1
        assert 4 <= length <= 8
        assert ids[-length:][1:] == targets
        first_copy = ids[: len(ids) - length]
        assert any(first_copy[i : i + length] == ids[-length:] for i in range(len(first_copy)))
        assert mask[: len(ids) - length + 1] == [False] * (len(ids) - length + 1)


def test_pseudo_words_never_use_a_convention_value(corpus):
    assert not set(corpus.words) & convention_values()
    assert len(corpus.words) >= 50


def test_every_conversation_row_starts_with_the_envs_system_block(corpus):
    for ids, mask in corpus.rows("conv", 3):
        assert ids[: len(corpus.prefix)] == corpus.prefix
        assert any(mask) and not any(mask[: len(corpus.prefix)])


def test_schedule_and_bad_phases():
    phase = Phase("p", steps=100, choice=1, lr=1e-3, warmup_steps=10)
    assert [phase.learning_rate(s) for s in (0, 9, 10, 99)] == pytest.approx([1e-4, 1e-3, 1e-3, 1e-3])
    decaying = replace(phase, constant_lr=False)
    assert decaying.learning_rate(10) == pytest.approx(1e-3)
    assert decaying.learning_rate(99) == pytest.approx(1e-4, rel=1e-2)  # 0.1 x lr at the end
    with pytest.raises(ValueError, match="at least one kind of row"):
        Phase("empty", steps=10)
    with pytest.raises(ValueError, match="induct_pool must be"):
        Phase("bad", steps=10, induct=1, induct_pool="letters")
    with pytest.raises(ValueError, match=r"hint_rate must be in \[0, 1\], got 1.5"):
        Phase("bad", steps=10, conv=1, hint_rate=1.5)
    assert [p.name for p in COPY_RECIPE] == ["induction", "mix", "drills", "choices", "unhinted"]
    assert sum(p.steps for p in COPY_RECIPE) == 3900
    assert [p.hint_rate for p in COPY_RECIPE] == [0.6, 0.6, 0.6, 0.6, 0.3]


def _build(path, recipe=TINY_RECIPE):
    build_recipe_student(
        path,
        tools=TOOL_SCHEMAS,
        system_prompt=SYSTEM_PROMPT,
        excluded_values=frozenset(convention_values()),
        recipe=recipe,
        spec=TINY_SHAPE,
    )
    return weights_sha256(path)


def test_the_recipe_build_is_deterministic_seeded_and_continues_each_phase(tmp_path):
    first = _build(tmp_path / "a")
    assert _build(tmp_path / "b") == first
    assert _build(tmp_path / "c", (TINY_RECIPE[0], replace(TINY_RECIPE[1], seed=2))) != first
    assert _build(tmp_path / "d", TINY_RECIPE[:1]) != first  # the second phase trained on
    assert is_student_built(tmp_path / "a", recipe="copy")
    assert not is_student_built(tmp_path / "a")  # not the conversations build
    assert is_student_built(tmp_path / "a", "copy", recipe_manifest(TINY_RECIPE, TINY_SHAPE))
    assert not is_student_built(tmp_path / "a", "copy", recipe_manifest(TINY_RECIPE[:1], TINY_SHAPE))
    assert not is_student_built(tmp_path / "a", "copy", recipe_manifest())  # an older recipe: rebuild
    manifest = json.loads((tmp_path / "a" / "student_model.json").read_text())
    assert manifest["weights_sha256"] == first and manifest["recipe"] == "copy"
    assert [p["steps"] for p in manifest["phases"]] == [2, 2] and manifest["shape"]["hidden_size"] == 32
    generation = json.loads((tmp_path / "a" / "generation_config.json").read_text())
    assert not {"top_k", "top_p", "temperature"} & set(generation)  # nothing a server would sample by


def test_the_command_refuses_a_seed_for_the_copy_recipe(tmp_path, capsys):
    from hermes_opd.commands.student_build import build_student_for_env

    assert build_student_for_env(tmp_path / "s", seed=3, recipe="copy") == 2
    assert "the copy recipe's phases carry their own seeds" in capsys.readouterr().err
    assert build_student_for_env(tmp_path / "s", seed=3, recipe="corrections") == 2
    assert not (tmp_path / "s").exists()
    with pytest.raises(
        ValueError, match="unknown student recipe 'fast'; known: conversations, copy, corrections"
    ):
        build_student_for_env(tmp_path / "s", recipe="fast")


def test_the_committed_student_is_todays_copy_recipe_with_the_dev_tokenizer():
    """The shipped student (hermes_opd/learning_study/student_q2) is `hermes-opd dev-model build-student DIR --recipe copy` of this
    code (docs/notes/learning-lab.md, "The quick test on the copying student"): a change to the recipe, the
    shape or the tokenizer fails here, and the student must be rebuilt with that command."""
    from transformers import AutoTokenizer

    from hermes_opd.learning_study.paths import shipped_student_dir

    fixture = shipped_student_dir()
    assert is_student_built(fixture, "copy", recipe_manifest())
    manifest = json.loads((fixture / "student_model.json").read_text())
    assert weights_sha256(fixture) == manifest["weights_sha256"]
    assert manifest["weights_sha256"].startswith(
        "ff8a806f"
    )  # the build measured in docs/notes/learning-lab.md
    committed, built = AutoTokenizer.from_pretrained(fixture), dev_tokenizer(DevModelSpec())
    assert committed.get_vocab() == built.get_vocab()
    text = "<|im_start|>user\nWrite `compute_mileage` in `helpers.py`.<|im_end|>"
    assert committed.encode(text) == built.encode(text)


def test_the_corrections_build_continues_a_copy_student_deterministically(tmp_path):
    base_sha = _build(tmp_path / "base")
    phase = Phase("corrections", steps=2, conv=1, choice=1, pseudo=50, verbatim=True, seed=11, warmup_steps=1)

    def corrections(out):
        build_corrections_student(
            out,
            base_dir=tmp_path / "base",
            tools=TOOL_SCHEMAS,
            system_prompt=SYSTEM_PROMPT,
            excluded_values=frozenset(convention_values()),
            phase=phase,
        )
        return weights_sha256(out)

    first = corrections(tmp_path / "c1")
    assert corrections(tmp_path / "c2") == first != base_sha
    assert is_student_built(tmp_path / "c1", "corrections", corrections_manifest(base_sha, phase))
    assert not is_student_built(tmp_path / "c1", "corrections", corrections_manifest("0" * 64, phase))
    with pytest.raises(ValueError, match="is not a built copy student"):
        corrections_base = tmp_path / "c1"  # a corrections build is not a base
        build_corrections_student(
            tmp_path / "c3", base_dir=corrections_base, tools=TOOL_SCHEMAS, system_prompt=SYSTEM_PROMPT
        )


def test_the_committed_corrections_student_continues_the_committed_copy_student():
    """hermes_opd/learning_study/student_q2c is `hermes-opd dev-model build-student DIR --recipe corrections`
    of this code and of the committed student_q2: a change to student_q2, the phase, the rate or the
    corrections' words fails here, and student_q2c must be rebuilt with that command."""
    from hermes_opd.learning_study.paths import shipped_corrections_student_dir, shipped_student_dir
    from hermes_opd.learning_study.student_corpus import MODULE_CORRECTIONS, NAME_CORRECTIONS

    fixture = shipped_corrections_student_dir()
    assert is_student_built(
        fixture, "corrections", corrections_manifest(weights_sha256(shipped_student_dir()))
    )
    manifest = json.loads((fixture / "student_model.json").read_text())
    assert weights_sha256(fixture) == manifest["weights_sha256"]
    assert manifest["weights_sha256"].startswith("57fc68a0")  # the build measured in STUDENT_Q2.md
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        assert (fixture / name).read_bytes() == (shipped_student_dir() / name).read_bytes()
    words = json.dumps([NAME_CORRECTIONS, MODULE_CORRECTIONS]).encode()
    assert (
        hashlib.sha256(words).hexdigest()
        == "9231c4fa81edd9468b2f8cf4ce7c971d12617cf5602595ddf20287caf9058364"
    )
