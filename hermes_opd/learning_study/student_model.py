"""Build the learnable dev student: a small Qwen2ForCausalLM pretrained locally on the conversations
of `student_corpus` (the tool-call format, and using the value an instruction names), with the dev
model's byte-level BPE tokenizer and chat template. Seeded and deterministic for a fixed thread
count; a few minutes on 2 CPU cores.

Every pretraining conversation starts with the same rendered system block (the env's system prompt
and tool schemas, several hundred tokens), so each step runs that prefix once, without gradient, shares
its key/value cache across the batch, and runs only the conversations' own tokens; the loss is on the
assistant tokens only.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import math
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from hermes_opd.devkit.dev_model import (
    DevModelSpec,
    _stdlib_texts,
    chat_template,
    dev_tokenizer,
    qwen2_config,
)
from hermes_opd.learning_study.student_corpus import copy_drill, pretrain_example, word_vocabulary

logger = logging.getLogger(__name__)

STUDENT_BUILDER_VERSION = 1
MANIFEST = "student_model.json"


@dataclass(frozen=True)
class StudentSpec:
    """Shape and pretraining budget of the student."""

    seed: int = 0
    hidden_size: int = 128
    intermediate_size: int = 384
    num_layers: int = 3
    num_heads: int = 4
    num_kv_heads: int = 2
    max_position_embeddings: int = 4096
    steps: int = 800
    batch: int = 6
    lr: float = 5e-3
    warmup_steps: int = 30
    drill_batch: int = 16
    """Short copy drills per step (`student_corpus.copy_drill`, no system block, so cheap)."""
    threads: int = 1
    """torch threads while pretraining. One is reproducible anywhere, and on a shared 2-core machine
    faster than two (measured: 1.8 s against 5-26 s a step with other jobs running)."""


def _render(tokenizer: Any, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> list[int]:
    return tokenizer.apply_chat_template(messages, tools=tools, tokenize=True, return_dict=False)


def assistant_mask(ids: list[int], tokenizer: Any) -> list[bool]:
    """True at the tokens of every assistant turn's body and its closing `<|im_end|>`."""
    start = tokenizer.convert_tokens_to_ids("<|im_start|>")
    end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    assistant = tokenizer.encode("assistant\n", add_special_tokens=False)
    mask = [False] * len(ids)
    i = 0
    while i < len(ids):
        if ids[i] == start and ids[i + 1 : i + 1 + len(assistant)] == assistant:
            j = i + 1 + len(assistant)
            while j < len(ids) and ids[j] != end:
                mask[j] = True
                j += 1
            if j < len(ids):
                mask[j] = True
            i = j
        i += 1
    return mask


def system_block(probe_ids: list[int], tokenizer: Any) -> list[int]:
    """The ids of a rendered [system, user] probe before its last `<|im_start|>`: the system block
    (prompt and tool schemas) that every conversation starts with."""
    start = tokenizer.convert_tokens_to_ids("<|im_start|>")
    return probe_ids[: max(i for i, t in enumerate(probe_ids) if t == start)]


@contextlib.contextmanager
def building_student(out_dir: str | Path, threads: int) -> Iterator[Path]:
    """The build's directory, its manifest removed first (a half-written build must not look built),
    with torch on `threads` threads until the block ends."""
    import torch

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / MANIFEST).unlink(missing_ok=True)
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield out
    finally:
        torch.set_num_threads(previous)


@dataclass
class _Batch:
    suffix_ids: Any  # (B, S) long, right-padded
    targets: Any  # (B, S) long, -100 where no loss


def padded_batch(rows: list[tuple[list[int], list[bool]]], pad_id: int) -> _Batch:
    """Right-padded `(ids, loss mask)` rows; position j - 1 targets ids[j] wherever mask[j] (j >= 1:
    the first id of a row is never a target)."""
    import torch

    width = max(len(ids) for ids, _ in rows)
    inputs = torch.full((len(rows), width), pad_id, dtype=torch.long)
    targets = torch.full((len(rows), width), -100, dtype=torch.long)
    for b, (ids, mask) in enumerate(rows):
        inputs[b, : len(ids)] = torch.tensor(ids)
        for j in range(1, len(ids)):
            if mask[j]:
                targets[b, j - 1] = ids[j]
    return _Batch(suffix_ids=inputs, targets=targets)


class PretrainStream:
    """Deterministic batches of (shared prefix, suffixes) from a seeded conversation generator."""

    def __init__(self, tokenizer, tools, system_prompt: str, words: tuple[str, ...], seed: int):
        self.tokenizer, self.tools, self.system_prompt, self.words = tokenizer, tools, system_prompt, words
        self.rng = random.Random(f"student-pretrain-{seed}")
        probe = _render(
            tokenizer, [{"role": "system", "content": system_prompt}, {"role": "user", "content": "x"}], tools
        )
        self.prefix = system_block(probe, tokenizer)
        """The rendered system block: every conversation starts with exactly these ids."""

    def example_ids(self) -> tuple[list[int], list[bool]]:
        example = pretrain_example(self.rng, self.system_prompt, self.words)
        ids = _render(self.tokenizer, example.messages, self.tools)
        if ids[: len(self.prefix)] != self.prefix:
            raise RuntimeError("a pretraining conversation does not start with the shared system block")
        return ids, assistant_mask(ids, self.tokenizer)

    def drill_batch(self, size: int) -> _Batch:
        """Right-padded copy drills (no shared prefix), targets on the answer tokens."""
        rows = []
        for _ in range(size):
            ids = _render(self.tokenizer, copy_drill(self.rng, self.words), None)
            rows.append((ids, assistant_mask(ids, self.tokenizer)))
        return padded_batch(rows, self.tokenizer.pad_token_id)

    def batch(self, size: int) -> _Batch:
        """Right-padded conversations after the shared system block (the first suffix token,
        `<|im_start|>` of the user turn, is never a target)."""
        p = len(self.prefix)
        rows = [(ids[p:], mask[p:]) for ids, mask in (self.example_ids() for _ in range(size))]
        return padded_batch(rows, self.tokenizer.pad_token_id)


def shared_prefix_loss(model, prefix_ids: list[int], batch: _Batch):
    """Mean cross-entropy over the target tokens, running the shared prefix once per batch."""
    import torch
    import torch.nn.functional as F

    size, width = batch.suffix_ids.shape
    p = len(prefix_ids)
    with torch.no_grad():  # the constant system block: computed by the current weights, not trained
        pre = model.model(input_ids=torch.tensor([prefix_ids]), use_cache=True)
    cache = pre.past_key_values
    for layer in cache.layers:
        layer.keys = layer.keys.expand(size, -1, -1, -1)
        layer.values = layer.values.expand(size, -1, -1, -1)
    positions = torch.arange(p, p + width).unsqueeze(0).expand(size, -1)
    hidden = model.model(
        input_ids=batch.suffix_ids, past_key_values=cache, position_ids=positions, use_cache=True
    ).last_hidden_state
    selected = batch.targets != -100
    logits = model.lm_head(hidden[selected])
    return F.cross_entropy(logits.float(), batch.targets[selected])


def plain_loss(model, batch: _Batch):
    """Mean cross-entropy over the target tokens of right-padded sequences with no shared prefix."""
    import torch.nn.functional as F

    hidden = model.model(input_ids=batch.suffix_ids).last_hidden_state
    selected = batch.targets != -100
    return F.cross_entropy(model.lm_head(hidden[selected]).float(), batch.targets[selected])


def pretrain_optimizer(model, lr: float):
    """The students' optimizer: AdamW, betas (0.9, 0.95), weight decay 0.01."""
    import torch

    return torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.01)


def optimizer_step(optimizer, model, loss, lr: float) -> float:
    """One step at `lr` with the gradient norm clipped to 1; returns the loss."""
    import torch

    for group in optimizer.param_groups:
        group["lr"] = lr
    optimizer.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    return float(loss.detach())


def _learning_rate(spec: StudentSpec, step: int) -> float:
    if step < spec.warmup_steps:
        return spec.lr * (step + 1) / spec.warmup_steps
    progress = (step - spec.warmup_steps) / max(1, spec.steps - spec.warmup_steps)
    return spec.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def build_student(
    out_dir: str | Path,
    *,
    tools: list[dict[str, Any]],
    system_prompt: str,
    excluded_values: frozenset[str] = frozenset(),
    spec: StudentSpec | None = None,
    progress: Callable[[int, int, float], None] | None = None,
) -> Path:
    """Pretrain the student and write tokenizer, chat template, config and float32 weights to
    `out_dir`. `tools` and `system_prompt` are the env's (the student sees exactly its rendering);
    `excluded_values` are convention values pretraining must never use."""
    import torch
    from transformers import Qwen2ForCausalLM

    spec = spec or StudentSpec()
    started = time.monotonic()
    with building_student(out_dir, spec.threads) as out:
        tokenizer = dev_tokenizer(DevModelSpec())
        words = word_vocabulary(_stdlib_texts(), excluded_values)
        stream = PretrainStream(tokenizer, tools, system_prompt, words, spec.seed)
        torch.manual_seed(spec.seed)
        config = qwen2_config(spec, tokenizer)
        model = Qwen2ForCausalLM(config).to(torch.float32)
        optimizer = pretrain_optimizer(model, spec.lr)
        model.train()
        losses: list[float] = []
        for step in range(spec.steps):
            loss = shared_prefix_loss(model, stream.prefix, stream.batch(spec.batch))
            if spec.drill_batch:
                loss = (loss + plain_loss(model, stream.drill_batch(spec.drill_batch))) / 2
            losses.append(optimizer_step(optimizer, model, loss, _learning_rate(spec, step)))
            if progress is not None:
                progress(step + 1, spec.steps, losses[-1])
    save_student(out, model, tokenizer, {"spec": asdict(spec)}, losses, time.monotonic() - started)
    return out


def save_student(
    out: Path, model: Any, tokenizer: Any, described: dict[str, Any], losses: list[float], pretrain_s: float
) -> dict[str, Any]:
    """Write weights, generation config (eos, pad: nothing a server would take as a sampling default),
    tokenizer and chat template, then the manifest last (its presence means a complete build)."""
    from transformers import GenerationConfig

    model.eval()
    model.save_pretrained(out, safe_serialization=True)
    eos_id = tokenizer.convert_tokens_to_ids("<|im_end|>")
    GenerationConfig(eos_token_id=eos_id, pad_token_id=tokenizer.pad_token_id).save_pretrained(out)
    tokenizer.save_pretrained(out)
    (out / "chat_template.jinja").write_text(chat_template())
    tail = losses[-20:] or [float("nan")]
    manifest = {
        "builder_version": STUDENT_BUILDER_VERSION,
        **described,
        "parameters": sum(p.numel() for p in model.parameters()),
        "final_loss": round(sum(tail) / len(tail), 4),
        "pretrain_s": round(pretrain_s, 1),
        "weights_sha256": weights_sha256(out),
    }
    (out / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    logger.info(
        "built the student in %s in %.1fs (%d params, final loss %.3f)",
        out,
        manifest["pretrain_s"],
        manifest["parameters"],
        manifest["final_loss"],
    )
    return manifest


def weights_sha256(path: str | Path) -> str:
    return hashlib.sha256((Path(path) / "model.safetensors").read_bytes()).hexdigest()


def is_student_built(
    path: str | Path, recipe: str = "conversations", expected: dict[str, Any] | None = None
) -> bool:
    """True when `path` holds a complete student build of `recipe` made by this version of the
    builder ("conversations": `build_student`; "copy": hermes_opd/learning_study/student_recipe.py), whose
    manifest also holds every entry of `expected` (for example the phases of the recipe today)."""
    p = Path(path)
    if not all((p / name).is_file() for name in (MANIFEST, "model.safetensors", "tokenizer.json")):
        return False
    try:
        manifest = json.loads((p / MANIFEST).read_text())
        return (
            manifest.get("builder_version") == STUDENT_BUILDER_VERSION
            and manifest.get("recipe", "conversations") == recipe
            and all(manifest.get(key) == value for key, value in (expected or {}).items())
        )
    except (OSError, ValueError, AttributeError):
        return False
