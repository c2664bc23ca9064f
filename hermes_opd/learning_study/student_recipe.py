"""The copy recipe for the learnable dev student: induction first, then phases of the conversation mix.

Pretrained on conversations alone, a student of this size does not copy a name it has never seen
(docs/notes/learning-lab.md, "Why the student does not copy"). This recipe, found with
scripts/student_copy_experiments.py, first trains induction only: random strings of 1-4 letter tokens,
repeated after random noise, with the loss on the repeat. Loss sits at chance for about 1,300 steps,
then drops (the induction phase change). Later phases continue from those weights on a mix of four
kinds of rows per step:

- `conv`: full conversations of `student_corpus.pretrain_example` behind the env's system block (run
  once per batch without gradient, student_model.shared_prefix_loss);
- `choice`: the same conversations without the system block;
- `drill`: `student_corpus.copy_drill` exchanges;
- `induct`: the induction rows above.

`pseudo` adds that many pseudo-words (2-4 random letter tokens) to the name pool, so names are as long
in tokens as the held-out ones. `verbatim` writes `def NAME(` in the answers as the token `Ġ` followed
by NAME's tokens as they appear between backticks, so a name can be copied token for token (the text
is the same). Each phase starts its own AdamW, seeds torch and its data generator with its `seed`;
on one torch thread the chain is deterministic.
"""

from __future__ import annotations

import functools
import json
import math
import random
import re
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from hermes_opd.learning_study.student_corpus import copy_drill, pretrain_example, word_vocabulary
from hermes_opd.learning_study.student_model import (
    MANIFEST,
    StudentSpec,
    _Batch,
    assistant_mask,
    building_student,
    is_student_built,
    optimizer_step,
    padded_batch,
    plain_loss,
    pretrain_optimizer,
    save_student,
    shared_prefix_loss,
    system_block,
    weights_sha256,
)

ROW_KINDS = ("conv", "choice", "drill", "induct")
SHAPE_FIELDS = (
    "hidden_size",
    "intermediate_size",
    "num_layers",
    "num_heads",
    "num_kv_heads",
    "max_position_embeddings",
)
"""The fields of a StudentSpec the recipe uses (its own phases replace the spec's schedule)."""


@dataclass(frozen=True)
class Phase:
    """One pretraining phase: rows of each kind per step, and its schedule."""

    name: str
    steps: int
    conv: int = 0
    choice: int = 0
    drill: int = 0
    induct: int = 0
    induct_len: int = 16
    """Longest repeated string of an induction row (in tokens; the shortest is 4)."""
    induct_pool: str = "pieces"
    """"pieces": every 1-4 letter token of the vocabulary; "words": the tokens of the name pool."""
    fixed_offset: bool = False
    """Induction rows without noise: the repeat at a constant distance (a positional shortcut)."""
    pseudo: int = 0
    verbatim: bool = False
    hint_rate: float = 0.6
    """The share of `conv` and `choice` rows with an open value whose user message names it."""
    lr: float = 1e-3
    constant_lr: bool = True
    """No cosine decay after the warmup."""
    warmup_steps: int = 30
    seed: int = 0

    def __post_init__(self) -> None:
        if self.steps < 1 or not any(getattr(self, kind) for kind in ROW_KINDS):
            raise ValueError(f"phase {self.name!r}: needs steps >= 1 and at least one kind of row")
        if self.induct_pool not in ("pieces", "words"):
            raise ValueError(f"phase {self.name!r}: induct_pool must be 'pieces' or 'words'")
        if not 0.0 <= self.hint_rate <= 1.0:
            raise ValueError(f"phase {self.name!r}: hint_rate must be in [0, 1], got {self.hint_rate}")

    def learning_rate(self, step: int) -> float:
        if step < self.warmup_steps:
            return self.lr * (step + 1) / self.warmup_steps
        if self.constant_lr:
            return self.lr
        progress = (step - self.warmup_steps) / max(1, self.steps - self.warmup_steps)
        return self.lr * (0.1 + 0.45 * (1 + math.cos(math.pi * progress)))


_MIX = {"pseudo": 3000, "verbatim": True}
COPY_RECIPE: tuple[Phase, ...] = (
    Phase("induction", steps=1700, induct=64),
    Phase("mix", steps=600, conv=4, choice=16, drill=16, induct=32, **_MIX),
    Phase("drills", steps=500, conv=8, choice=8, drill=32, induct=16, seed=1, **_MIX),
    Phase("choices", steps=800, conv=8, choice=24, drill=16, induct=16, seed=2, **_MIX),
    Phase("unhinted", steps=300, conv=16, choice=8, drill=8, induct=8, hint_rate=0.3, seed=5, **_MIX),
)
"""The student "Q2" of docs/notes/learning-lab.md: 3,900 steps, about 50 minutes on one core. Its first four
phases are the student "P5"; the last weights the conversations behind the system block, with fewer
instructions, which raised the unhinted T=1 success on held-out tasks from 4 % to 15 %."""

CORRECTIONS_PHASE = Phase(
    "corrections", steps=300, conv=16, choice=8, drill=8, induct=8, seed=11, lr=3e-4, **_MIX
)
CORRECTION_RATE = 0.6
"""The student "Q2C": Q2 continued for one phase (about 5 minutes on one core) in which 60 % of the
instructions are a person's corrections (`student_corpus.NAME_CORRECTIONS`, `MODULE_CORRECTIONS`) and
the rest the rules judge's hints. Q2 only ever saw an instruction that names the value; told by a
user "we name functions `compute_`<noun> here", its hinted teacher writes the name where the file
goes (docs/recipes/learning-bench.md, "Through the proxy"), and Q2C's does not."""


class RecipeCorpus:
    """The tokenizer, the name pool and every kind of row of one phase, from seeded generators."""

    def __init__(
        self,
        tokenizer: Any,
        tools: list[dict[str, Any]],
        system_prompt: str,
        base_words: tuple[str, ...],
        excluded: frozenset[str],
        phase: Phase,
        correction_rate: float = 0.0,
    ) -> None:
        self.tok, self.tools, self.system_prompt, self.phase = tokenizer, tools, system_prompt, phase
        self.correction_rate = correction_rate
        """The share of instructions written as a person's correction (student_corpus.pretrain_example)."""
        pieces = sorted(t for t in tokenizer.get_vocab() if re.fullmatch(r"[a-z]{1,4}", t))
        rng = random.Random(f"pseudo-{phase.seed}")
        words = set(base_words)
        extra: set[str] = set()
        while len(extra) < phase.pseudo:
            word = "".join(rng.choice(pieces) for _ in range(rng.randint(2, 4)))
            if 4 <= len(word) <= 12 and word not in excluded and word not in words:
                extra.add(word)
        self.words = tuple(sorted(words | extra))
        if phase.induct_pool == "pieces":
            self.pool = sorted(tokenizer.convert_tokens_to_ids(t) for t in pieces)
        else:
            self.pool = sorted({i for w in self.words for i in tokenizer.encode(w, add_special_tokens=False)})
        self.rng = random.Random(phase.seed)
        self.space = tokenizer.convert_tokens_to_ids("Ġ")
        probe = self.encode(
            [{"role": "system", "content": system_prompt}, {"role": "user", "content": "x"}], tools
        )
        self.prefix = system_block(probe, tokenizer)
        """The rendered system block: every `conv` row starts with exactly these ids."""

    def encode(self, messages, tools, generation_prompt: bool = False) -> list[int]:
        text = self.tok.apply_chat_template(
            messages, tools=tools, tokenize=False, add_generation_prompt=generation_prompt
        )
        if not self.phase.verbatim:
            return self.tok.encode(text, add_special_tokens=False)
        ids: list[int] = []
        pos = 0
        for match in re.finditer(r"def (\w+)\(", text):
            ids += self.tok.encode(text[pos : match.start()] + "def", add_special_tokens=False)
            ids += [self.space, *self.tok.encode(match.group(1), add_special_tokens=False)]
            pos = match.end(1)
        return ids + self.tok.encode(text[pos:], add_special_tokens=False)

    def rows(self, kind: str, n: int) -> list[tuple[list[int], list[bool]]]:
        """`n` rows of a conversation kind (conv, choice, drill): ids and the assistant-token mask."""
        out = []
        for _ in range(n):
            if kind == "drill":
                ids = self.encode(copy_drill(self.rng, self.words), None)
            else:
                messages = pretrain_example(
                    self.rng, self.system_prompt, self.words, self.phase.hint_rate, self.correction_rate
                ).messages
                ids = self.encode(messages, self.tools) if kind == "conv" else self.encode(messages[1:], None)
            out.append((ids, assistant_mask(ids, self.tok)))
        return out

    def induction_rows(self, n: int) -> list[tuple[list[int], list[bool]]]:
        """`noise A gap A` (A: 4..induct_len pool tokens), loss on the second A after its first token."""
        out = []
        for _ in range(n):
            length = self.rng.randint(4, self.phase.induct_len)
            seq = [self.rng.choice(self.pool) for _ in range(length)]
            if self.phase.fixed_offset:
                noise, gap = [], []
            else:
                noise = [self.rng.choice(self.pool) for _ in range(self.rng.randint(0, 24))]
                gap = [self.rng.choice(self.pool) for _ in range(self.rng.randint(1, 24))]
            ids = noise + seq + gap + seq
            out.append((ids, [False] * (len(noise) + length + len(gap) + 1) + [True] * (length - 1)))
        return out

    def batch(self, rows) -> _Batch:
        return padded_batch(rows, self.tok.pad_token_id)


def recipe_corpus(
    tokenizer: Any,
    tools: list[dict[str, Any]],
    system_prompt: str,
    excluded: frozenset[str],
    phase: Phase,
    correction_rate: float = 0.0,
) -> RecipeCorpus:
    from hermes_opd.devkit.dev_model import _stdlib_texts

    words = word_vocabulary(_stdlib_texts(), excluded)
    return RecipeCorpus(tokenizer, tools, system_prompt, words, excluded, phase, correction_rate)


def step_losses(model, corpus: RecipeCorpus) -> dict[str, Any]:
    """One step's loss per kind of row (in ROW_KINDS order; kinds with 0 rows left out)."""
    phase, parts = corpus.phase, {}
    if phase.conv:
        p = len(corpus.prefix)
        rows = [(ids[p:], mask[p:]) for ids, mask in corpus.rows("conv", phase.conv)]
        parts["conv"] = shared_prefix_loss(model, corpus.prefix, corpus.batch(rows))
    for kind in ("choice", "drill"):
        if getattr(phase, kind):
            parts[kind] = plain_loss(model, corpus.batch(corpus.rows(kind, getattr(phase, kind))))
    if phase.induct:
        parts["induct"] = plain_loss(model, corpus.batch(corpus.induction_rows(phase.induct)))
    return parts


def train_phase(model, corpus: RecipeCorpus, progress=None) -> list[float]:
    """Train `model` in place for one phase (a fresh AdamW); returns the mean loss of every step.
    `progress(step, steps, parts)` is called after each step with that step's losses by kind."""
    phase = corpus.phase
    optimizer = pretrain_optimizer(model, phase.lr)
    model.train()
    losses: list[float] = []
    for step in range(phase.steps):
        parts = step_losses(model, corpus)
        losses.append(
            optimizer_step(optimizer, model, sum(parts.values()) / len(parts), phase.learning_rate(step))
        )
        if progress is not None:
            progress(step + 1, phase.steps, {k: float(v.detach()) for k, v in parts.items()})
    return losses


def recipe_manifest(
    recipe: tuple[Phase, ...] = COPY_RECIPE, spec: StudentSpec | None = None
) -> dict[str, Any]:
    """What a build's manifest records of its recipe: the phases and the model's shape (JSON values,
    so a manifest read back compares equal)."""
    shape = {k: v for k, v in asdict(spec or StudentSpec()).items() if k in SHAPE_FIELDS}
    return {"phases": [asdict(p) for p in recipe], "shape": shape}


def build_recipe_student(
    out_dir: str | Path,
    *,
    tools: list[dict[str, Any]],
    system_prompt: str,
    excluded_values: frozenset[str] = frozenset(),
    recipe: tuple[Phase, ...] = COPY_RECIPE,
    spec: StudentSpec | None = None,
    progress: Callable[[str, int, int, dict[str, float]], None] | None = None,
) -> Path:
    """Run `recipe`'s phases in order on a fresh student of `spec`'s shape (one torch thread) and
    write it to `out_dir` like `build_student`, the manifest recording recipe "copy" and its phases.
    `progress(phase name, step, steps, losses by kind)` after every step."""
    import torch
    from transformers import Qwen2ForCausalLM

    from hermes_opd.devkit.dev_model import DevModelSpec, dev_tokenizer, qwen2_config

    if not recipe:
        raise ValueError("a recipe needs at least one phase")
    spec = spec or StudentSpec()
    started = time.monotonic()
    losses: list[float] = []
    with building_student(out_dir, threads=1) as out:
        tokenizer = dev_tokenizer(DevModelSpec())
        model = None
        for phase in recipe:
            corpus = recipe_corpus(tokenizer, tools, system_prompt, excluded_values, phase)
            torch.manual_seed(phase.seed)
            if model is None:
                model = Qwen2ForCausalLM(qwen2_config(spec, tokenizer))
            report = None if progress is None else functools.partial(progress, phase.name)
            losses = train_phase(model, corpus, report)
    described = {"recipe": "copy", **recipe_manifest(recipe, spec)}
    save_student(out, model, tokenizer, described, losses, time.monotonic() - started)
    return out


def corrections_manifest(base_sha256: str, phase: Phase = CORRECTIONS_PHASE) -> dict[str, Any]:
    """What a corrections build's manifest records: its base's weights, the phase and the rate."""
    return {"base_weights_sha256": base_sha256, "phases": [asdict(phase)], "correction_rate": CORRECTION_RATE}


def build_corrections_student(
    out_dir: str | Path,
    *,
    base_dir: str | Path,
    tools: list[dict[str, Any]],
    system_prompt: str,
    excluded_values: frozenset[str] = frozenset(),
    phase: Phase = CORRECTIONS_PHASE,
    progress: Callable[[str, int, int, dict[str, float]], None] | None = None,
) -> Path:
    """Continue the copy student in `base_dir` (its weights, tokenizer and shape) for `phase` with
    `CORRECTION_RATE` of its instructions written as corrections (one torch thread, deterministic),
    and write it to `out_dir`, the manifest recording recipe "corrections" and the base's sha256."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from hermes_opd.devkit.dev_model import DevModelSpec, dev_tokenizer

    base = Path(base_dir)
    if not is_student_built(base, "copy"):
        raise ValueError(
            f"{base} is not a built copy student (hermes-opd dev-model build-student DIR --recipe copy)"
        )
    started = time.monotonic()
    with building_student(out_dir, threads=1) as out:
        tokenizer = AutoTokenizer.from_pretrained(base)
        model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
        corpus = recipe_corpus(tokenizer, tools, system_prompt, excluded_values, phase, CORRECTION_RATE)
        torch.manual_seed(phase.seed)
        report = None if progress is None else functools.partial(progress, phase.name)
        losses = train_phase(model, corpus, report)
        described = {
            "recipe": "corrections",
            **corrections_manifest(weights_sha256(base), phase),
            "shape": json.loads((base / MANIFEST).read_text())["shape"],
        }
        # the base's tokenizer as the copy build wrote it (a loaded one saves with a normalizer added)
        saved_tokenizer = dev_tokenizer(DevModelSpec())
        save_student(out, model, saved_tokenizer, described, losses, time.monotonic() - started)
    return out
