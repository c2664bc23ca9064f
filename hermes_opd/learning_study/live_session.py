"""One conversation of the simulated user with the agent behind `hermes-opd proxy`, over the
official `openai` client: ask for a convention task's function, run the assistant's tool calls in a
real sandbox (environments/rollout/tools.py), let the env's verifier try the result, and reply in
the same request as the tool results, the way a person reviewing the change would
(hermes_opd/learning_study/live_user.py). The reply is the assistant turn's next state; the
request that carries it ends the session (`X-Session-End`), so each session gives the proxy exactly
one turn to train on, and the answer to the reply is served but never trained."""

from __future__ import annotations

import json
import random
import uuid
from dataclasses import asdict, dataclass
from typing import Any

from openai import AsyncOpenAI

from environments.atropos.agentic_opd_config import AgenticOPDConfig
from environments.proxy.proxy_config import END_HEADER, SESSION_HEADER
from environments.rollout.sandbox.limits import SandboxLimits
from environments.rollout.sandbox.sandbox import Sandbox
from environments.rollout.tool_calls import ToolCall
from environments.rollout.tools import TOOL_SCHEMAS, execute_tool_call
from environments.rollout.verifier import verify
from environments.tasks.conventions import ConventionTask
from environments.tasks.task import Task
from hermes_opd.learning_study.live_user import Phrasings, outcome_of, user_reply

SYSTEM_PROMPT = AgenticOPDConfig.model_fields["system_prompt"].default
"""The agent's system prompt: the env's, so the agent sees what its rollouts see."""
REPLY_ANSWER_TOKENS = 16
"""The answer to the user's reply ends the session untrained; a few tokens are enough."""


@dataclass(frozen=True)
class SessionResult:
    session: str
    task_id: str
    kind: str
    outcome: str
    reply: str
    tool_calls: int
    written: list[str]

    def record(self) -> dict[str, Any]:
        return asdict(self)


async def converse(
    client: AsyncOpenAI,
    model: str,
    spec: ConventionTask,
    task: Task,
    *,
    phrasings: Phrasings,
    rng: random.Random,
    max_tokens: int,
    limits: SandboxLimits | None = None,
) -> SessionResult:
    """One session: the request, the attempt, the user's reply. Raises the client's errors."""
    session = f"live-{uuid.uuid4().hex[:12]}"
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": task.prompt},
    ]
    first = await client.chat.completions.create(
        model=model,
        messages=messages,
        tools=TOOL_SCHEMAS,
        max_tokens=max_tokens,
        temperature=1.0,
        extra_headers={SESSION_HEADER: session},
    )
    message = first.choices[0].message
    calls = list(message.tool_calls or [])
    written: dict[str, str] = {}
    tool_messages = []
    limits = limits or SandboxLimits()
    async with Sandbox.create(limits) as sandbox:
        for call in calls:
            try:
                arguments = json.loads(call.function.arguments or "{}")
            except json.JSONDecodeError:
                arguments = {}
            result = await execute_tool_call(
                ToolCall(name=call.function.name, arguments=arguments, raw="", id=call.id), sandbox
            )
            if call.function.name == "write_file" and not result.is_error:
                written[str(arguments.get("path"))] = str(arguments.get("content", ""))
            tool_messages.append({"role": "tool", "tool_call_id": call.id, "content": result.content})
        verdict = await verify(task, sandbox, limits=limits)
    passed = verdict.total > 0 and verdict.passed == verdict.total
    outcome = outcome_of(spec, written, passed)
    reply = user_reply(spec, outcome, written, phrasings, rng)
    messages += [message.model_dump(exclude_none=True), *tool_messages, {"role": "user", "content": reply}]
    await client.chat.completions.create(
        model=model,
        messages=messages,
        tools=TOOL_SCHEMAS,
        max_tokens=REPLY_ANSWER_TOKENS,
        temperature=1.0,
        extra_headers={SESSION_HEADER: session, END_HEADER: "true"},
    )
    return SessionResult(
        session=session,
        task_id=task.task_id,
        kind=spec.kind,
        outcome=outcome,
        reply=reply,
        tool_calls=len(calls),
        written=sorted(written),
    )
