"""`hermes-opd dev-model build DIR --agent` writes the agent dev model (hermes_opd/devkit/agent_dev_model.py),
`--if-missing` keeps a build, and its set weights write the template's plan token by token in a
float32 transformers forward pass, with every other token far behind. (On vLLM at 1k-60k tokens:
tests/integration/test_agent_dev_model.py.)"""

from __future__ import annotations

import json

import torch

from hermes_opd.commands.dev_model import main as dev_model_main
from hermes_opd.devkit.agent_dev_model import AGENT_MAX_MODEL_LEN, is_agent_built, plan_of
from tests.unit.test_agent_chat_template import ASK, CLAUDE_CODE, OTHER


def test_the_cli_builds_it_and_its_weights_write_the_plan(tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = tmp_path / "agent"
    assert dev_model_main(["build", str(out), "--agent"]) == 0
    assert is_agent_built(out)
    stamp = (out / "model.safetensors").stat().st_mtime_ns
    assert dev_model_main(["build", str(out), "--agent", "--if-missing"]) == 0
    assert (out / "model.safetensors").stat().st_mtime_ns == stamp
    assert json.loads((out / "config.json").read_text())["max_position_embeddings"] == AGENT_MAX_MODEL_LEN

    tokenizer = AutoTokenizer.from_pretrained(out)
    model = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    for tools in (CLAUDE_CODE, OTHER):
        ids = tokenizer.apply_chat_template(
            ASK, tools=tools, add_generation_prompt=True, tokenize=True, return_dict=False
        )
        plan = plan_of(tokenizer.decode(ids))
        written, margins = [], []
        with torch.no_grad():
            for _ in range(len(plan) + 1):
                logits = model(torch.tensor([ids + written])).logits[0, -1]
                top = torch.topk(logits, 2)
                written.append(int(top.indices[0]))
                margins.append(float(top.values[0] - top.values[1]))
        assert written[-1] == tokenizer.eos_token_id
        assert tokenizer.decode(written[:-1]) == plan
        assert min(margins) > 30
