"""The learnable dev student's builder (hermes_opd/learning_study/student_model.py) and its pretraining data
(hermes_opd/learning_study/student_corpus.py): deterministic, never a held-out convention, the env's exact
rendering and hint placement, and an exact shared-prefix loss."""

from __future__ import annotations

import hashlib
import json
import random
import re
from dataclasses import replace

import pytest

from environments.atropos.agentic_opd_config import AgenticOPDConfig
from environments.rollout.tools import TOOL_SCHEMAS
from environments.tasks.conventions import HELDOUT_NOUNS, convention_values, generate
from hermes_opd.devkit.dev_model import DevModelSpec, _stdlib_texts, dev_tokenizer
from hermes_opd.learning_study import student_corpus
from hermes_opd.learning_study.student_model import (
    PretrainStream,
    StudentSpec,
    assistant_mask,
    build_student,
    is_student_built,
    shared_prefix_loss,
    weights_sha256,
)
from hermes_opd.record.hint import HINT_SEPARATOR, enhance_messages

SYSTEM_PROMPT = AgenticOPDConfig.model_fields["system_prompt"].default
TINY = StudentSpec(
    hidden_size=32,
    intermediate_size=64,
    num_layers=1,
    num_heads=1,
    num_kv_heads=1,
    steps=2,
    batch=2,
    warmup_steps=1,
)


@pytest.fixture(scope="module")
def tokenizer():
    return dev_tokenizer(DevModelSpec())


@pytest.fixture(scope="module")
def words():
    return student_corpus.word_vocabulary(_stdlib_texts(), frozenset(convention_values()))


def _build(path, spec):
    build_student(
        path,
        tools=TOOL_SCHEMAS,
        system_prompt=SYSTEM_PROMPT,
        excluded_values=frozenset(convention_values()),
        spec=spec,
    )
    return weights_sha256(path)


def test_builder_is_deterministic_and_seeded(tmp_path):
    first = _build(tmp_path / "a", TINY)
    assert _build(tmp_path / "b", TINY) == first
    assert _build(tmp_path / "c", replace(TINY, seed=1)) != first
    assert is_student_built(tmp_path / "a")
    manifest = json.loads((tmp_path / "a" / "student_model.json").read_text())
    assert manifest["weights_sha256"] == first and manifest["spec"]["steps"] == 2


def test_pretraining_never_contains_a_convention_value(words):
    forbidden = convention_values()
    assert not forbidden & set(words)
    rng = random.Random(0)
    examples = [student_corpus.pretrain_example(rng, SYSTEM_PROMPT, words) for _ in range(3000)]
    drills = [student_corpus.copy_drill(rng, words) for _ in range(1000)]
    examples += [
        student_corpus.PretrainExample(messages=[{}, *d], open_kind=None, hinted=None) for d in drills
    ]
    seen = student_corpus.pretrain_values(examples)
    assert len(seen) > 1000  # the extraction finds the names: the check below is not vacuous
    assert not seen & forbidden
    heldout_names = {t.function for t in generate()["heldout"]}
    text = json.dumps([e.messages[1:] for e in examples])
    assert not [v for v in heldout_names | set(HELDOUT_NOUNS) if re.search(rf"(?<![a-z]){v}(?![a-z])", text)]


def test_pretraining_teaches_uniform_guesses_and_following_the_instruction(words):
    rng = random.Random(1)
    examples = [student_corpus.pretrain_example(rng, SYSTEM_PROMPT, words) for _ in range(2000)]
    hinted = [e for e in examples if e.hinted]
    assert 0.4 < len(hinted) / len(examples) < 0.7
    for example in hinted:
        user = example.messages[1]["content"]
        instruction = user.split(HINT_SEPARATOR)[1]
        assert f"`{example.hinted}`" in instruction
        path = json.loads(example.messages[2]["tool_calls"][0]["function"]["arguments"])["path"]
        written = path if example.open_kind == "module" else example.messages[2]["tool_calls"][0]["function"]
        assert example.hinted in json.dumps(written)


@pytest.mark.parametrize("hint_rate", [0.0, 0.3, 1.0])
def test_hint_rate_sets_the_share_of_open_values_an_instruction_names(words, hint_rate):
    rng = random.Random(2)
    examples = [student_corpus.pretrain_example(rng, SYSTEM_PROMPT, words, hint_rate) for _ in range(1000)]
    open_ = [e for e in examples if e.open_kind is not None]
    share = sum(1 for e in open_ if e.hinted) / len(open_)
    assert share == pytest.approx(hint_rate, abs=0.05)
    for example in open_:
        assert (HINT_SEPARATOR in example.messages[1]["content"]) == (example.hinted is not None)


def test_the_default_hint_rate_draws_the_same_conversations_as_before():
    """0.6 was the fixed rate the students of docs/notes/learning-lab.md were built with: the default keeps their
    rows draw for draw (the hash was taken from the code before `hint_rate` existed)."""
    words = tuple(f"{a}{b}" for a in ("tab", "row", "map", "key", "set") for b in ("le", "ing", "er", "ed"))
    rng = random.Random(5)
    rows = [student_corpus.pretrain_example(rng, "sys", words).messages for _ in range(200)]
    digest = hashlib.sha256(json.dumps(rows).encode()).hexdigest()
    assert digest == "17a2c389546ef990e272dbbed2cb50e0f6aeb95e966c6255641b1bc937d336ca"


def test_hint_separator_is_the_one_opd_uses():
    assert student_corpus.HINT_SEPARATOR == HINT_SEPARATOR
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "task"}]
    assert (
        enhance_messages(messages, "Use `x`.")[1]["content"]
        == "task" + student_corpus.HINT_SEPARATOR + "Use `x`."
    )


def test_stream_renders_the_envs_prompt_and_masks_only_assistant_tokens(tokenizer, words):
    stream = PretrainStream(tokenizer, TOOL_SCHEMAS, SYSTEM_PROMPT, words, seed=0)
    env_render = tokenizer.apply_chat_template(
        [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": "anything"}],
        tools=TOOL_SCHEMAS,
        tokenize=True,
        return_dict=False,
    )
    assert env_render[: len(stream.prefix)] == stream.prefix and len(stream.prefix) > 500
    ids, mask = stream.example_ids()
    learned = tokenizer.decode([t for t, m in zip(ids, mask, strict=True) if m])
    assert learned.startswith('<tool_call>\n{"name": "write_file", "arguments": {"path": "')
    assert learned.count("<|im_end|>") == 2 and "<|im_start|>" not in learned
    assert "Wrote " not in learned and "Write a function" not in learned
    assert assistant_mask([1, 2, 3], tokenizer) == [False] * 3


def test_shared_prefix_loss_equals_the_plain_forward(tokenizer, words):
    import torch
    import torch.nn.functional as F
    from transformers import Qwen2Config, Qwen2ForCausalLM

    stream = PretrainStream(tokenizer, TOOL_SCHEMAS, SYSTEM_PROMPT, words, seed=3)
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(
        Qwen2Config(
            vocab_size=len(tokenizer),
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=2,
            num_attention_heads=2,
            num_key_value_heads=1,
            tie_word_embeddings=False,
        )
    ).eval()
    batch = stream.batch(3)
    shared = shared_prefix_loss(model, stream.prefix, batch)
    total, count = 0.0, 0
    with torch.no_grad():
        for row in range(3):
            full = torch.cat([torch.tensor(stream.prefix), batch.suffix_ids[row]])[None]
            logits = model(input_ids=full).logits[0, len(stream.prefix) :]
            selected = batch.targets[row] != -100
            total += float(F.cross_entropy(logits[selected], batch.targets[row][selected], reduction="sum"))
            count += int(selected.sum())
    assert count > 100
    assert float(shared.detach()) == pytest.approx(total / count, rel=1e-5)


def test_a_correction_rate_writes_that_share_of_instructions_as_a_persons_correction(words):
    """The corrections phase (student_recipe.CORRECTIONS_PHASE): the same value named, in a person's words."""
    rng = random.Random(4)
    examples = [
        student_corpus.pretrain_example(rng, SYSTEM_PROMPT, words, 1.0, correction_rate=0.6)
        for _ in range(1000)
    ]
    hinted = [e for e in examples if e.hinted]
    forms = {
        "name": [f.split("{")[0] for f in student_corpus.NAME_CORRECTIONS],
        "module": [f.split("{")[0] for f in student_corpus.MODULE_CORRECTIONS],
    }
    corrections = 0
    for example in hinted:
        instruction = example.messages[1]["content"].split(HINT_SEPARATOR, 1)[1]
        assert (
            f"`{example.hinted}`" in instruction
            or f"`{example.hinted.removesuffix('.py')}.py`" in instruction
        )
        corrections += any(instruction.startswith(head) for head in forms[example.open_kind])
    assert corrections / len(hinted) == pytest.approx(0.6, abs=0.05)
