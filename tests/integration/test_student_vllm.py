"""The shipped student (hermes_opd/learning_study/student_q2) in the real vLLM CPU server and in
transformers: it loads in both, and on a held-out convention task rendered exactly as the env renders
it, it answers with a tool call the env's parser accepts. (Its recipe's builds are checked in
tests/unit/test_student_recipe.py and tests/unit/test_student_model.py.)"""

from __future__ import annotations

import json
import urllib.request

import pytest

from environments.atropos.agentic_opd_config import AgenticOPDConfig
from environments.rollout.tool_calls import ToolCall, parse_tool_calls
from environments.rollout.tools import TOOL_NAMES, TOOL_SCHEMAS
from environments.tasks.conventions import convention_splits
from hermes_opd.record.transcript_recorder import TranscriptRecorder

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def student_dir():
    from hermes_opd.learning_study.paths import shipped_student_dir

    return shipped_student_dir()


def _context(tokenizer, task) -> list[int]:
    messages = [
        {"role": "system", "content": AgenticOPDConfig.model_fields["system_prompt"].default},
        {"role": "user", "content": task.prompt},
    ]
    return TranscriptRecorder(tokenizer, TOOL_SCHEMAS).start(messages)


def _completion(server, prompt_ids: list[int]) -> dict:
    body = {
        "model": server.model_name,
        "prompt": prompt_ids,
        "max_tokens": 160,
        "temperature": 0.0,
        "logprobs": 1,
        "return_token_ids": True,
    }
    request = urllib.request.Request(
        f"{server.base_url}/completions", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=120) as response:
        return json.loads(response.read())["choices"][0]


def test_student_loads_in_vllm_and_emits_a_parsable_tool_call(student_dir, tmp_path):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from hermes_opd.devkit.dev_server import DevServer

    tokenizer = AutoTokenizer.from_pretrained(student_dir)
    _, heldout = convention_splits()
    task = heldout[0]
    context = _context(tokenizer, task)
    with DevServer(
        str(student_dir), served_model_name="dev-student", log_path=str(tmp_path / "vllm.log")
    ) as server:
        choice = _completion(server, context)
    generated = choice["token_ids"]
    text = tokenizer.decode(generated, skip_special_tokens=False)
    parsed = parse_tool_calls(text.removesuffix("<|im_end|>"), TOOL_NAMES)
    assert parsed.calls and all(isinstance(c, ToolCall) for c in parsed.calls), text
    call = parsed.calls[0]
    assert call.name == "write_file" and call.arguments["path"].endswith(".py")
    assert call.arguments["content"].startswith("def ")

    # The same weights in transformers: the same greedy first token, with the same logprob.
    model = AutoModelForCausalLM.from_pretrained(student_dir, dtype=torch.float32).eval()
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([context])).logits[0, -1]
    logp = torch.log_softmax(logits.float(), dim=-1)
    assert int(torch.argmax(logp)) == generated[0]
    assert float(logp[generated[0]]) == pytest.approx(choice["logprobs"]["token_logprobs"][0], abs=1e-3)
