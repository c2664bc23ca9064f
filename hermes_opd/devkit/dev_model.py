"""Build the tiny dev model: a locally trained BPE tokenizer, a ChatML template with tools, and a
small Qwen2-architecture model briefly fitted to synthetic agent transcripts. Nothing is downloaded;
the same seed gives byte-identical files.

The tokenizer is a byte-level BPE behind the GPT-4/Qwen2/Llama-3 style pre-tokenizer regex, so it
merges across the same boundaries production tokenizers do: punctuation with the newlines after it
(`'.' + '\n\n'` is one token `'.\n\n'`), runs of newlines, single digits. Every test and the demo
therefore see the boundary effects a production tokenizer has (hint splices, glue, tool calls).
"""

from __future__ import annotations

import hashlib
import json
import logging
import random
import sysconfig
import time
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

BUILDER_VERSION = 2
"""Bumped whenever the build's output changes for the same spec (1: GPT-2-style byte-level
pre-tokenizer; 2: the GPT-4/Qwen-style split regex). `is_built` treats any other stamp as stale, so
`dev-model build --if-missing` and the test fixtures rebuild a cache left by older code."""

PRETOKENIZER_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
    r"|\s+(?!\S)|\s+"
)
"""The pre-tokenizer split of Qwen2-family tokenizers (GPT-4's cl100k pattern with single digits).
Its alternative for punctuation also takes the newlines that follow it, so '.' + two newlines is one
pre-token, and BPE learns it as one token."""

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
MARKUP_TOKENS = ["<tool_call>", "</tool_call>", "<think>", "</think>"]

# Fixed stdlib files (present in every CPython 3.11+) used as tokenizer training text.
STDLIB_CORPUS = [
    "json/__init__.py",
    "textwrap.py",
    "argparse.py",
    "pathlib.py",
    "shutil.py",
    "subprocess.py",
    "unittest/case.py",
    "collections/__init__.py",
    "functools.py",
    "heapq.py",
    "bisect.py",
    "string.py",
    "difflib.py",
    "statistics.py",
    "fractions.py",
    "csv.py",
    "traceback.py",
    "dataclasses.py",
    "enum.py",
]


@dataclass(frozen=True)
class DevModelSpec:
    """Shape and training budget of the dev model."""

    seed: int = 0
    vocab_size: int = 4096
    hidden_size: int = 128
    intermediate_size: int = 384
    num_layers: int = 2
    num_heads: int = 4
    num_kv_heads: int = 2
    max_position_embeddings: int = 4096
    fit_steps: int = 120
    fit_batch: int = 4
    fit_seq_len: int = 256
    fit_lr: float = 3e-3


def qwen2_config(spec: Any, tokenizer: Any) -> Any:
    """The Qwen2 architecture of a locally built model (the dev model, the student): float32, untied
    embeddings, the chat template's special tokens. `spec` has the shape fields of DevModelSpec."""
    from transformers import Qwen2Config

    return Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_layers,
        num_attention_heads=spec.num_heads,
        num_key_value_heads=spec.num_kv_heads,
        max_position_embeddings=spec.max_position_embeddings,
        tie_word_embeddings=False,
        bos_token_id=tokenizer.convert_tokens_to_ids("<|endoftext|>"),
        eos_token_id=tokenizer.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=tokenizer.pad_token_id,
        dtype="float32",
    )


ARCHITECTURES = ("qwen2", "qwen3")
"""`qwen2`: the default dev model. `qwen3`: the same tokenizer, sizes, seed and fit as a Qwen3
(per-head q/k RMSNorm, no q/k/v biases, head_dim hidden/heads), for servers that do not load Qwen2
(the local Tinker-API server, hermes_opd/devkit/tinker_server.py); vLLM serves both."""


def qwen3_config(spec: Any, tokenizer: Any) -> Any:
    """`qwen2_config`'s shape and special tokens as a Qwen3 architecture."""
    from transformers import Qwen3Config

    return Qwen3Config(
        vocab_size=len(tokenizer),
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_layers,
        num_attention_heads=spec.num_heads,
        num_key_value_heads=spec.num_kv_heads,
        head_dim=spec.hidden_size // spec.num_heads,
        max_position_embeddings=spec.max_position_embeddings,
        tie_word_embeddings=False,
        bos_token_id=tokenizer.convert_tokens_to_ids("<|endoftext|>"),
        eos_token_id=tokenizer.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=tokenizer.pad_token_id,
        dtype="float32",
    )


def _causal_lm(architecture: str, spec: DevModelSpec, tokenizer: Any) -> Any:
    from transformers import Qwen2ForCausalLM, Qwen3ForCausalLM

    if architecture == "qwen2":
        return Qwen2ForCausalLM(qwen2_config(spec, tokenizer))
    if architecture == "qwen3":
        return Qwen3ForCausalLM(qwen3_config(spec, tokenizer))
    raise ValueError(f"unknown dev model architecture {architecture!r}; choose one of {ARCHITECTURES}")


def chat_template() -> str:
    return resources.files("hermes_opd.devkit").joinpath("chat_template.jinja").read_text()


def _stdlib_texts() -> list[str]:
    root = Path(sysconfig.get_paths()["stdlib"])
    texts = []
    for rel in STDLIB_CORPUS:
        path = root / rel
        if path.is_file():
            texts.append(path.read_text(encoding="utf-8", errors="replace"))
    if not texts:
        raise RuntimeError(f"no stdlib sources found under {root} to train the dev tokenizer on")
    return texts


def build_tokenizer(spec: DevModelSpec, extra_texts: list[str]):
    """Train a byte-level BPE on local text and wrap it as a transformers fast tokenizer."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    raw = Tokenizer(models.BPE())
    raw.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(PRETOKENIZER_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    raw.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=spec.vocab_size - len(MARKUP_TOKENS),
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    raw.train_from_iterator(_stdlib_texts() + extra_texts, trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=raw,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        bos_token=None,
        unk_token=None,
        clean_up_tokenization_spaces=False,
    )
    tokenizer.add_tokens(MARKUP_TOKENS)
    tokenizer.chat_template = chat_template()
    tokenizer.model_max_length = spec.max_position_embeddings
    return tokenizer


def dev_tokenizer(spec: DevModelSpec):
    """The dev model's tokenizer for `spec`, trained exactly as `build_dev_model` trains it."""
    return build_tokenizer(spec, _render_corpus_plain(random.Random(spec.seed)))


def _render_corpus(tokenizer, rng: random.Random, count: int) -> list[str]:
    from hermes_opd.devkit.dev_corpus import DEV_TOOLS, synthetic_conversation

    return [
        tokenizer.apply_chat_template(synthetic_conversation(rng), tools=DEV_TOOLS, tokenize=False)
        for _ in range(count)
    ]


def _fit(model, tokenizer, texts: list[str], spec: DevModelSpec) -> float:
    """A few optimizer steps on packed transcripts, single-threaded so the result is reproducible."""
    import torch

    ids: list[int] = []
    for text in texts:
        ids.extend(tokenizer(text, add_special_tokens=False)["input_ids"])
    data = torch.tensor(ids, dtype=torch.long)
    n_windows = (len(data) - 1) // spec.fit_seq_len
    windows = data[: n_windows * spec.fit_seq_len].view(n_windows, spec.fit_seq_len)
    generator = torch.Generator().manual_seed(spec.seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=spec.fit_lr, weight_decay=0.0)
    model.train()
    loss_value = float("nan")
    for _ in range(spec.fit_steps):
        batch = windows[torch.randint(0, n_windows, (spec.fit_batch,), generator=generator)]
        loss = model(input_ids=batch, labels=batch).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        loss_value = float(loss.detach())
    model.eval()
    return loss_value


def build_dev_model(
    out_dir: str | Path, spec: DevModelSpec | None = None, *, architecture: str = "qwen2"
) -> Path:
    """Write tokenizer, chat template, config and float32 weights to `out_dir` (`architecture`: one
    of ARCHITECTURES; the default build is unchanged by the option)."""
    import torch
    from transformers import GenerationConfig

    spec = spec or DevModelSpec()
    if architecture not in ARCHITECTURES:
        raise ValueError(f"unknown dev model architecture {architecture!r}; choose one of {ARCHITECTURES}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    stale = built_version(out)
    if stale is not None and stale != BUILDER_VERSION:
        logger.info("replacing the dev model in %s built by builder version %d", out, stale)
    (out / "dev_model.json").unlink(missing_ok=True)  # a half-rebuilt stale build must not look built
    started = time.monotonic()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        rng = random.Random(spec.seed)
        tokenizer = build_tokenizer(spec, _render_corpus_plain(rng))
        torch.manual_seed(spec.seed)
        eos_id = tokenizer.convert_tokens_to_ids("<|im_end|>")
        model = _causal_lm(architecture, spec, tokenizer).to(torch.float32)
        loss = float("nan")
        if spec.fit_steps > 0:
            loss = _fit(model, tokenizer, _render_corpus(tokenizer, rng, 300), spec)
        model.save_pretrained(out, safe_serialization=True)
        GenerationConfig(eos_token_id=eos_id, pad_token_id=tokenizer.pad_token_id).save_pretrained(out)
        tokenizer.save_pretrained(out)
        (out / "chat_template.jinja").write_text(chat_template())
    finally:
        torch.set_num_threads(threads)
    manifest = {
        "builder_version": BUILDER_VERSION,
        "spec": spec.__dict__,
        "parameters": sum(p.numel() for p in model.parameters()),
        "fit_loss": round(loss, 4),
        **({} if architecture == "qwen2" else {"architecture": architecture}),
        "files": {
            p.name: _sha256(p) for p in sorted(out.iterdir()) if p.is_file() and p.name != "dev_model.json"
        },
    }
    (out / "dev_model.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    logger.info(
        "built dev model in %s in %.1fs (%d params, fit loss %.3f)",
        out,
        time.monotonic() - started,
        manifest["parameters"],
        loss,
    )
    return out


def _render_corpus_plain(rng: random.Random) -> list[str]:
    """Transcript text for tokenizer training, rendered without a tokenizer (plain ChatML)."""
    from hermes_opd.devkit.dev_corpus import synthetic_conversation

    texts = []
    for _ in range(200):
        parts = []
        for message in synthetic_conversation(rng):
            body = message.get("content") or ""
            for call in message.get("tool_calls", []):
                fn = call["function"]
                body += (
                    f'\n<tool_call>\n{{"name": "{fn["name"]}", "arguments": {fn["arguments"]}}}\n</tool_call>'
                )
            parts.append(f"<|im_start|>{message['role']}\n{body}<|im_end|>\n")
        texts.append("".join(parts))
    return texts


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def built_version(path: str | Path) -> int | None:
    """The `builder_version` stamped in `path`'s manifest (1 for builds that predate the stamp), or
    None when `path` holds no complete build."""
    p = Path(path)
    if not all((p / name).is_file() for name in ("dev_model.json", "model.safetensors", "tokenizer.json")):
        return None
    try:
        manifest = json.loads((p / "dev_model.json").read_text())
    except (OSError, ValueError):
        return None
    version = manifest.get("builder_version", 1) if isinstance(manifest, dict) else None
    return version if isinstance(version, int) else None


def is_built(path: str | Path, *, architecture: str = "qwen2") -> bool:
    """True when `path` holds a complete dev model build of `architecture` made by this version of
    the builder."""
    if built_version(path) != BUILDER_VERSION:
        return False
    manifest = json.loads((Path(path) / "dev_model.json").read_text())
    return manifest.get("architecture", "qwen2") == architecture
