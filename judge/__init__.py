"""Hindsight judge: prompt, parsing, vote policies and backends (LLM over an OpenAI-compatible API,
or deterministic rules).

Typical use by the OPD pipeline:

    backend = make_judge_backend(config, policy_base_url=..., policy_model=...)
    result = await judge_turn(pair, backend, config)   # JudgeError if every request failed
    if result.accepted: ... result.hint ...; provenance: result.as_dict()
    await backend.aclose()
"""

from judge.backends import JudgeBackend, JudgeError, make_judge_backend
from judge.config import JudgeConfig
from judge.judge_turn import JudgeResult, judge_turn
from judge.parsing import Vote, parse_vote
from judge.prompt import JudgePrompt, build_judge_prompt
from judge.votes import VoteOutcome, decide

__all__ = [
    "JudgeBackend",
    "JudgeConfig",
    "JudgeError",
    "JudgePrompt",
    "JudgeResult",
    "Vote",
    "VoteOutcome",
    "build_judge_prompt",
    "decide",
    "judge_turn",
    "make_judge_backend",
    "parse_vote",
]
