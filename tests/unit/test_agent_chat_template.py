"""The agent dev model's chat template (hermes_opd/devkit/agent_chat_template.jinja): the plan it writes
for the tools real clients send, the judge's format, and a history that renders append-only, so the
proxy's recorder extends its exact stream over a call and its result (no fork), and every plan
character sits the same number of tokens before the position that writes it."""

from __future__ import annotations

import json

import pytest

from environments.rollout.tool_calls import parse_tool_calls
from hermes_opd.devkit.agent_dev_model import PLAN_CHARS, agent_tokenizer, char_token, copy_offset, plan_of
from hermes_opd.record.transcript_recorder import TranscriptRecorder
from judge.parsing import parse_vote
from judge.prm_prompt import PRM_SYSTEM_PROMPT
from judge.prompt import SYSTEM_PROMPT


def _fn(name, properties, required):
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": "d",
            "parameters": {"type": "object", "properties": properties, "required": required},
        },
    }


CODEX = [
    _fn("update_plan", {"plan": {"type": "array"}}, ["plan"]),
    _fn(
        "shell",
        {
            "command": {"type": "array", "items": {"type": "string"}},
            "workdir": {"type": "string"},
            "timeout_ms": {"type": "number"},
        },
        ["command"],
    ),
]
CLAUDE_CODE = [
    _fn("Task", {"description": {"type": "string"}, "prompt": {"type": "string"}}, ["description", "prompt"]),
    _fn("Bash", {"command": {"type": "string"}, "timeout": {"type": "number"}}, ["command"]),
]
OPENCODE = [
    _fn("read", {"filePath": {"type": "string"}}, ["filePath"]),
    _fn(
        "bash", {"command": {"type": "string"}, "description": {"type": "string"}}, ["command", "description"]
    ),
]
OTHER = [
    _fn(
        "get_weather",
        {
            "city": {"type": "string"},
            "units": {"type": "string", "enum": ["c", "f"]},
            "days": {"type": ["integer", "null"]},
            "note": {"type": "string"},
        },
        ["city", "units", "days"],
    )
]
SMOLAGENTS = [
    _fn("web_search", {"query": {"type": "string"}}, ["query"]),
    _fn("final_answer", {"answer": {"type": "string"}}, ["answer"]),
]


@pytest.fixture(scope="module")
def tokenizer():
    return agent_tokenizer()


def _plan(tokenizer, messages, tools=None) -> str:
    return plan_of(
        tokenizer.apply_chat_template(messages, tools=tools, tokenize=False, add_generation_prompt=True)
    )


ASK = [{"role": "system", "content": "You are an agent."}, {"role": "user", "content": "List the files."}]


@pytest.mark.parametrize(
    ("tools", "name", "arguments"),
    [
        (CODEX, "shell", {"command": ["echo", "hi"]}),
        (CLAUDE_CODE, "Bash", {"command": "echo hi"}),
        (OPENCODE, "bash", {"command": "echo hi", "description": "hi"}),
        (OTHER, "get_weather", {"city": "hi", "units": "c", "days": 1}),
        (SMOLAGENTS, "web_search", {"query": "hi"}),
    ],
)
def test_the_first_turn_plan_is_one_valid_call_that_fits_the_schema(tokenizer, tools, name, arguments):
    parsed = parse_tool_calls(_plan(tokenizer, ASK, tools), {t["function"]["name"] for t in tools})
    assert [(c.name, c.arguments) for c in parsed.calls] == [(name, arguments)]


def test_after_a_tool_result_the_plan_is_a_short_answer_or_final_answer(tokenizer):
    call = '<tool_call>\n{"name": "shell", "arguments": {"command": ["echo", "hi"]}}\n</tool_call>'
    history = [*ASK, {"role": "assistant", "content": call}, {"role": "tool", "content": "hi\n"}]
    answer = _plan(tokenizer, history, CODEX)
    assert answer and "<tool_call>" not in answer
    observed = [*ASK, {"role": "assistant", "content": call}, {"role": "user", "content": "Observation: hi"}]
    final = parse_tool_calls(_plan(tokenizer, observed, SMOLAGENTS), {"final_answer", "web_search"})
    assert [(c.name, c.arguments) for c in final.calls] == [("final_answer", {"answer": "hi"})]


def test_the_judges_prompts_get_answers_their_parsers_read(tokenizer):
    vote = parse_vote(
        _plan(tokenizer, [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": "x"}])
    )
    assert vote.score == 1 and vote.hint and len(vote.hint) > 10
    prm = _plan(
        tokenizer, [{"role": "system", "content": PRM_SYSTEM_PROMPT}, {"role": "user", "content": "x"}]
    )
    assert prm == "\\boxed{1}"


def test_the_recorder_extends_a_call_and_its_result_without_a_rewrite(tokenizer):
    recorder = TranscriptRecorder(tokenizer, CODEX)
    context = recorder.start(ASK)
    plan = plan_of(tokenizer.decode(context))
    ids = tokenizer(plan, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    recorder.record_generation(ids, [-0.1] * len(ids), {"role": "assistant", "content": plan}, plan)
    following = recorder.extend([{"role": "tool", "content": json.dumps({"output": "hi"})}])
    assert following[: len(context) + len(ids)] == context + ids
    assert plan_of(tokenizer.decode(following)) == "Done: the command ran."


def test_each_plan_character_sits_at_the_copy_offset(tokenizer):
    ids = tokenizer.apply_chat_template(
        ASK, tools=CODEX, add_generation_prompt=True, tokenize=True, return_dict=False
    )
    plan = _plan(tokenizer, ASK, CODEX)
    offset = copy_offset(tokenizer)
    first = len(ids)  # the position of the answer's first token
    for i, char in enumerate(plan):
        assert ids[first - 1 + i - offset] == tokenizer.convert_tokens_to_ids(char_token(char))
    assert ids[first - 1 + len(plan) - offset] == tokenizer.convert_tokens_to_ids(char_token("pad"))
    assert len(plan) < PLAN_CHARS
