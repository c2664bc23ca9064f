"""Build the agent dev model: a tiny local model that real agent clients fit in (no downloads).

It shares the dev model's tokenizer (hermes_opd/devkit/dev_model.py), and differs in three ways:
- a 64k context (`max_position_embeddings` 65536), so a Codex CLI, Claude Code or OpenCode request
  of 10k-85k bytes fits;
- its chat template (agent_chat_template.jinja) writes a `plan` block before each assistant turn: a
  call of the request's shell-like tool (else its first tool) with arguments that fit the tool's
  JSON schema, a short answer once a tool result is back, or the judge's verdict and hint in the
  judge's answer format (judge/prompt.py) when the request is the judge's;
- its weights copy that plan: a one-layer Qwen2 whose weights are SET, not trained. The template
  writes the plan one `<|c:X|>` token per character (97 added tokens), padded with `<|c:pad|>` to
  PLAN_CHARS tokens, so the character the model must write next always sits COPY_OFFSET tokens
  back. The one attention head attends to exactly that offset (q/k biases phased for RoPE), its
  values carry the character's class, and the output embedding maps each class to the byte-level
  token of that character (the pad to the EOS), with a margin of about LOGIT_GAIN * 11 nats.

The template decides WHAT the model says; vLLM samples every token of it from these weights, so the
proxy's recorder, the tool-call parser, the `llm` judge and the teacher all run on real ids and real
logprobs. It is a test rig, not an agent: it never reads the task. Build:
`hermes-opd dev-model build DIR --agent` (a fraction of a second after the tokenizer).
"""

from __future__ import annotations

import json
import logging
import math
import re
import time
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from hermes_opd.devkit.dev_model import BUILDER_VERSION, DevModelSpec, _sha256, built_version, dev_tokenizer

logger = logging.getLogger(__name__)

AGENT_BUILDER_VERSION = 1
"""Bumped whenever the agent build's output changes for the same spec; `is_agent_built` treats any
other stamp as stale."""

PLAN_CHARS = 256
"""Tokens of every plan block (the template's PLAN_CHARS): a longer plan is cut, a shorter one padded."""
CHARS = " !\"#$%&'()*+,-./0123456789:;<=>?@ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqrstuvwxyz{|}~\n"
"""The characters a plan can hold (the template's CHARS); any other is written as `?`."""
PAD = "pad"
PLAN_OPEN = "<|im_start|>plan\n"
BETWEEN = "<|im_end|>\n<|im_start|>assistant\n"
"""The template's text between a plan block's last token and the assistant's first."""
LOGIT_GAIN = 4.0
"""Output embedding scale: the copied token's logit is about 45 (11.3 * 4), every other one 0."""
SCORE_AMPLITUDE = 20.0
"""Attention score per RoPE frequency pair at the copy offset; the nearest offsets score about
2 * SCORE_AMPLITUDE less, every other one far less, so the copy holds at any position up to 64k."""
AGENT_MAX_MODEL_LEN = 65536
AGENT_SERVED_NAME = "agent-dev-model"


@dataclass(frozen=True)
class AgentModelSpec:
    """Shape of the agent dev model (the tokenizer is the dev model's for `seed`)."""

    seed: int = 0
    hidden_size: int = 128
    num_heads: int = 1
    max_position_embeddings: int = AGENT_MAX_MODEL_LEN
    rope_theta: float = 10000.0


def char_token(char: str) -> str:
    return f"<|c:{char}|>"


def agent_chat_template() -> str:
    return resources.files("hermes_opd.devkit").joinpath("agent_chat_template.jinja").read_text()


def agent_tokenizer(spec: AgentModelSpec | None = None):
    """The dev model's tokenizer plus the plan's character tokens, the agent template, a 64k limit."""
    spec = spec or AgentModelSpec()
    tokenizer = dev_tokenizer(DevModelSpec(seed=spec.seed))
    tokenizer.add_tokens([char_token(c) for c in CHARS] + [char_token(PAD)], special_tokens=True)
    tokenizer.chat_template = agent_chat_template()
    tokenizer.model_max_length = spec.max_position_embeddings
    return tokenizer


_PLAN_TOKEN = re.compile(r"<\|c:(pad|[\s\S])\|>")


def plan_of(rendered: str) -> str:
    """The plan text of the last plan block of a rendered prompt."""
    start = rendered.rindex(PLAN_OPEN) + len(PLAN_OPEN)
    block = rendered[start : rendered.index("<|im_end|>", start)]
    return "".join(c for c in _PLAN_TOKEN.findall(block) if c != PAD)


def copy_offset(tokenizer) -> int:
    """Tokens from the position that writes plan character i back to that character's token."""
    between = tokenizer(BETWEEN, add_special_tokens=False)["input_ids"]
    return PLAN_CHARS + len(between) - 1


def _byte_token_ids(tokenizer) -> list[int]:
    """The byte-level BPE token of each character of CHARS."""
    from tokenizers.pre_tokenizers import ByteLevel  # noqa: F401  (the alphabet is the byte map)

    table = _bytes_to_unicode()
    ids = []
    for char in CHARS:
        token = "".join(table[b] for b in char.encode())
        token_id = tokenizer.convert_tokens_to_ids(token)
        if token_id is None or token_id == tokenizer.unk_token_id:
            raise RuntimeError(f"the tokenizer has no single token for {char!r}")
        ids.append(token_id)
    return ids


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> printable character map, which byte-level BPE vocabularies are written in."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    chars = printable[:]
    extra = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + extra)
            extra += 1
    return dict(zip(printable, map(chr, chars), strict=True))


def agent_config(spec: AgentModelSpec, tokenizer):
    from transformers import Qwen2Config

    return Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=spec.hidden_size,
        intermediate_size=8,
        num_hidden_layers=1,
        num_attention_heads=spec.num_heads,
        num_key_value_heads=spec.num_heads,
        max_position_embeddings=spec.max_position_embeddings,
        rope_theta=spec.rope_theta,
        tie_word_embeddings=False,
        bos_token_id=tokenizer.convert_tokens_to_ids("<|endoftext|>"),
        eos_token_id=tokenizer.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=tokenizer.pad_token_id,
        dtype="float32",
    )


def set_copy_weights(model, tokenizer, spec: AgentModelSpec) -> None:
    """Make `model` (one layer, one head of head_dim = hidden) write, at every position, the
    character whose plan token sits `copy_offset` tokens back: the EOS for a pad."""
    import torch

    hidden = spec.hidden_size
    classes = len(CHARS) + 1  # the characters, then the pad
    junk = hidden - 1  # every other token's embedding: read by nothing
    if classes > junk:
        raise ValueError(f"hidden size {hidden} is too small for {classes} plan classes")
    offset = copy_offset(tokenizer)
    half = hidden // 2
    inv_freq = [spec.rope_theta ** (-2 * j / hidden) for j in range(half)]
    radius = math.sqrt(SCORE_AMPLITUDE * math.sqrt(hidden))
    plan_ids = [tokenizer.convert_tokens_to_ids(char_token(c)) for c in CHARS] + [
        tokenizer.convert_tokens_to_ids(char_token(PAD))
    ]
    out_ids = _byte_token_ids(tokenizer) + [tokenizer.eos_token_id]
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.zero_()
        embed = model.model.embed_tokens.weight
        embed[:, junk] = 1.0
        for cls, token_id in enumerate(plan_ids):
            embed[token_id, junk] = 0.0
            embed[token_id, cls] = 1.0
        layer = model.model.layers[0]
        layer.input_layernorm.weight.fill_(1.0)
        layer.post_attention_layernorm.weight.fill_(1.0)
        model.model.norm.weight.fill_(1.0)
        attention = layer.self_attn
        # RoPE turns (x_j, x_{j+half}) by position * inv_freq[j]: a query at m and a key at n then
        # score sum_j r^2 cos((m - n - offset) * inv_freq[j]) / sqrt(hidden), highest at the offset.
        for j, freq in enumerate(inv_freq):
            attention.q_proj.bias[j] = radius
            attention.k_proj.bias[j] = radius * math.cos(offset * freq)
            attention.k_proj.bias[j + half] = radius * math.sin(offset * freq)
        attention.v_proj.weight.copy_(torch.eye(hidden))
        attention.o_proj.weight.copy_(torch.eye(hidden))
        for cls, token_id in enumerate(out_ids):
            model.lm_head.weight[token_id, cls] = LOGIT_GAIN


def build_agent_model(out_dir: str | Path, spec: AgentModelSpec | None = None) -> Path:
    """Write tokenizer, agent template, config and float32 weights to `out_dir`."""
    import torch
    from transformers import GenerationConfig, Qwen2ForCausalLM

    spec = spec or AgentModelSpec()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "dev_model.json").unlink(missing_ok=True)  # a half-rebuilt build must not look built
    started = time.monotonic()
    tokenizer = agent_tokenizer(spec)
    model = Qwen2ForCausalLM(agent_config(spec, tokenizer)).to(torch.float32)
    set_copy_weights(model, tokenizer, spec)
    model.save_pretrained(out, safe_serialization=True)
    GenerationConfig(
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id
    ).save_pretrained(out)
    tokenizer.save_pretrained(out)
    (out / "chat_template.jinja").write_text(agent_chat_template())
    manifest = {
        "builder_version": BUILDER_VERSION,
        "agent_builder_version": AGENT_BUILDER_VERSION,
        "kind": "agent",
        "spec": spec.__dict__,
        "parameters": sum(p.numel() for p in model.parameters()),
        "copy_offset": copy_offset(tokenizer),
        "files": {
            p.name: _sha256(p) for p in sorted(out.iterdir()) if p.is_file() and p.name != "dev_model.json"
        },
    }
    (out / "dev_model.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    logger.info("built the agent dev model in %s in %.1fs", out, time.monotonic() - started)
    return out


def is_agent_built(path: str | Path) -> bool:
    """True when `path` holds a complete agent dev model made by this version of the builder."""
    if built_version(path) != BUILDER_VERSION:
        return False
    manifest = json.loads((Path(path) / "dev_model.json").read_text())
    return manifest.get("kind") == "agent" and manifest.get("agent_builder_version") == AGENT_BUILDER_VERSION


def default_agent_model_dir() -> Path:
    """`$HERMES_OPD_AGENT_DEV_MODEL`, else `<cache>/agent-dev-model`."""
    import os

    from environments.atropos.embedded_paths import cache_dir

    env = os.environ.get("HERMES_OPD_AGENT_DEV_MODEL")
    return Path(env) if env else cache_dir() / "agent-dev-model"


def agent_dev_server(model_dir: str | Path, **overrides: Any):
    """A `DevServer` for the agent dev model with its 64k context (not started)."""
    from hermes_opd.devkit.dev_server import DevServer

    settings: dict[str, Any] = {
        "served_model_name": AGENT_SERVED_NAME,
        "max_model_len": AGENT_MAX_MODEL_LEN,
        "kv_cache_gib": 1,
    }
    settings.update(overrides)
    return DevServer(str(model_dir), **settings)
