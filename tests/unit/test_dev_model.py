"""The dev model builds reproducibly with a tool-aware ChatML template, and a build from older code is
rebuilt. The dev server CLI against a real vLLM is in tests/integration/test_dev_model_and_server.py."""

from __future__ import annotations

import json

import pytest

from hermes_opd.devkit.dev_model import DevModelSpec, build_dev_model, is_built


def test_same_seed_gives_identical_files(tmp_path):
    spec = DevModelSpec(fit_steps=3, vocab_size=1024)
    a = json.loads((build_dev_model(tmp_path / "a", spec) / "dev_model.json").read_text())
    b = json.loads((build_dev_model(tmp_path / "b", spec) / "dev_model.json").read_text())
    assert a["files"] == b["files"]
    assert {"model.safetensors", "tokenizer.json", "config.json", "chat_template.jinja"} <= set(a["files"])
    c = json.loads(
        (
            build_dev_model(tmp_path / "c", DevModelSpec(fit_steps=3, vocab_size=1024, seed=1))
            / "dev_model.json"
        ).read_text()
    )
    assert c["files"]["model.safetensors"] != a["files"]["model.safetensors"]


def test_a_build_from_older_code_is_stale_and_rebuilt_by_if_missing(tmp_path, monkeypatch):
    from hermes_opd.commands import main as cli
    from hermes_opd.devkit.dev_model import BUILDER_VERSION, built_version, is_built

    out = build_dev_model(tmp_path / "m", DevModelSpec(fit_steps=0, vocab_size=1024))
    assert built_version(out) == BUILDER_VERSION and is_built(out)
    manifest = json.loads((out / "dev_model.json").read_text())
    assert manifest["builder_version"] == BUILDER_VERSION
    del manifest["builder_version"]  # what the pre-stamp builder wrote
    (out / "dev_model.json").write_text(json.dumps(manifest))
    assert built_version(out) == 1 and not is_built(out)
    calls = []
    monkeypatch.setattr(
        "hermes_opd.devkit.dev_model.build_dev_model", lambda path, spec, **_: calls.append(path)
    )
    assert cli.main(["dev-model", "build", str(out), "--if-missing"]) == 0
    assert calls == [str(out)], "a stale cache is rebuilt, not reused"
    (out / "dev_model.json").write_text(json.dumps({**manifest, "builder_version": BUILDER_VERSION}))
    assert cli.main(["dev-model", "build", str(out), "--if-missing"]) == 0
    assert calls == [str(out)], "a current build is reused"


def test_qwen3_option_keeps_tokenizer_and_sizes_and_leaves_the_default_build_alone(tmp_path):
    spec = DevModelSpec(fit_steps=0, vocab_size=1024)
    qwen2 = build_dev_model(tmp_path / "q2", spec)
    qwen3 = build_dev_model(tmp_path / "q3", spec, architecture="qwen3")
    config = json.loads((qwen3 / "config.json").read_text())
    assert config["architectures"] == ["Qwen3ForCausalLM"] and config["head_dim"] == 32
    assert (config["hidden_size"], config["num_hidden_layers"], config["num_key_value_heads"]) == (128, 2, 2)
    assert (qwen3 / "tokenizer.json").read_bytes() == (qwen2 / "tokenizer.json").read_bytes()
    assert "architecture" not in json.loads((qwen2 / "dev_model.json").read_text())
    assert is_built(qwen3, architecture="qwen3") and not is_built(qwen3)
    assert is_built(qwen2) and not is_built(qwen2, architecture="qwen3")
    with pytest.raises(ValueError, match="unknown dev model architecture 'llama'"):
        build_dev_model(tmp_path / "x", spec, architecture="llama")


def test_dev_tokenizer_pre_tokenizes_like_qwen(dev_tokenizer):
    pre = dev_tokenizer.backend_tokenizer.pre_tokenizer.pre_tokenize_str("x = 12; done.\n\nNext:\n")
    # Byte-level pieces: 'Ġ' is a space, 'Ċ' a newline. Punctuation keeps the newlines after it; digits split.
    assert [piece for piece, _ in pre] == ["x", "Ġ=", "Ġ", "1", "2", ";", "Ġdone", ".ĊĊ", "Next", ":Ċ"]
    pieces = [
        dev_tokenizer.decode([i]) for i in dev_tokenizer.encode("done.\n\nNext:\n", add_special_tokens=False)
    ]
    assert ".\n\n" in pieces and ":\n" in pieces, "and BPE learned those merges"


def test_chat_template_renders_tools_calls_and_tool_results(dev_tokenizer):
    tools = [{"type": "function", "function": {"name": "terminal", "description": "Run.", "parameters": {}}}]
    messages = [
        {"role": "user", "content": "list files"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"type": "function", "function": {"name": "terminal", "arguments": {"command": "ls"}}}
            ],
        },
        {"role": "tool", "name": "terminal", "content": "a.py"},
    ]
    text = dev_tokenizer.apply_chat_template(
        messages, tools=tools, tokenize=False, add_generation_prompt=True
    )
    assert '<tools>\n{"type": "function", "function": {"name": "terminal"' in text
    assert (
        '<|im_start|>assistant\n<tool_call>\n{"name": "terminal", "arguments": {"command": "ls"}}\n</tool_call><|im_end|>'
        in text
    )
    assert "<|im_start|>tool\na.py<|im_end|>\n<|im_start|>assistant\n" in text
    ids = dev_tokenizer.encode("<tool_call></tool_call><|im_end|>", add_special_tokens=False)
    assert len(ids) == 3, "markup and EOS are single tokens"
