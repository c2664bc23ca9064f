"""Judge and teacher faults during real rollouts: each leaves a valid group with the failure counted,
and the run goes on. The faulty judge/teacher are local fake endpoints (timeouts, 500s, 400s and
malformed bodies are faults a real server can't produce on demand); the policy is the real dev vLLM."""

from __future__ import annotations

import asyncio
import json

import pytest
from aiohttp import web

from hermes_opd.contract.validation import validate_group
from scoring.teacher import TeacherTokenizerMismatchError
from tests.support.env_factory import make_env
from tests.support.judges import AlwaysHintJudge

pytestmark = pytest.mark.integration


class FaultyEndpoint:
    """A local server for one fault: judge chat completions and/or teacher completions."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.calls = 0
        self.runner: web.AppRunner | None = None
        self.base_url = ""

    async def chat(self, request: web.Request) -> web.StreamResponse:
        self.calls += 1
        if self.mode == "judge-timeout":
            await asyncio.sleep(3)  # far past the judge's 0.3 s; the server's stop waits for it
        return web.Response(status=500, text="judge exploded")

    async def completions(self, request: web.Request) -> web.StreamResponse:
        self.calls += 1
        body = await request.json()
        if self.mode == "teacher-400":
            message = f"Requested prompt logprobs of {body.get('prompt_logprobs')}, which is greater than max allowed: 20"
            return web.json_response({"error": {"message": message, "code": 400}}, status=400)
        if self.mode == "teacher-malformed":
            return web.json_response({"choices": [{"prompt_logprobs": [None, {"1": {"rank": 1}}]}]})
        if self.mode == "teacher-nan":
            ids = body["prompt"]
            row = {str(ids[1]): {"logprob": float("nan"), "rank": 1}}
            return web.Response(
                text=json.dumps({"choices": [{"prompt_logprobs": [None] + [row] * (len(ids) - 1)}]}),
                content_type="application/json",
            )
        return web.Response(status=500)

    async def tokenize(self, request: web.Request) -> web.StreamResponse:
        return web.json_response({"tokens": [1, 2, 3]})

    async def __aenter__(self) -> FaultyEndpoint:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self.chat)
        app.router.add_post("/v1/completions", self.completions)
        app.router.add_post("/tokenize", self.tokenize)
        app.router.add_post("/detokenize", self.tokenize)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        self.base_url = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}/v1"
        return self

    async def __aexit__(self, *exc) -> None:
        await self.runner.cleanup()


def statuses(group) -> list[str]:
    return [t["status"] for o in group["overrides"] for t in o["opd"]["turns"]]


@pytest.mark.parametrize("mode", ["judge-timeout", "judge-500"])
async def test_judge_faults_leave_turns_unscored(dev_server, tmp_path, mode):
    async with FaultyEndpoint(mode) as judge:
        env = make_env(
            dev_server,
            tmp_path,
            group_size=2,
            max_turns=2,
            judge_backend="llm",
            judge_base_url=judge.base_url,
            judge_model="judge",
            judge_timeout_s=0.3,
            judge_votes=2,
        )
        await env.setup()
        env.pipeline.judge.config = env.pipeline.judge.config.model_copy(
            update={"max_retries": 1, "backoff_base_s": 0.01}
        )
        for _ in range(2):  # the run continues after a faulty group
            group, _ = await env.collect_trajectories(await env.get_next_item())
            assert len(group["tokens"]) == 2
            assert validate_group(group) == []
            found = statuses(group)
            assert "judge_error" in found and "scored" not in found, found
            assert all(row == [] for rows in group["distill_token_ids"] for row in rows)
        assert judge.calls >= 2
    metrics = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert metrics[-1]["opd/turns_judge_error"] >= 1


@pytest.mark.parametrize("mode", ["teacher-400", "teacher-malformed", "teacher-nan"])
async def test_teacher_faults_leave_turns_unscored(dev_server, tmp_path, mode):
    async with FaultyEndpoint(mode) as teacher:
        env = make_env(
            dev_server,
            tmp_path,
            group_size=2,
            max_turns=2,
            teacher_base_url=teacher.base_url,
            teacher_model="teacher",
            check_teacher_tokenizer=False,
        )
        await env.setup()
        env.pipeline.judge = AlwaysHintJudge()
        group, _ = await env.collect_trajectories(await env.get_next_item())
        assert validate_group(group) == []
        found = statuses(group)
        assert "teacher_error" in found and "scored" not in found, found
        errors = [
            t["error"]
            for o in group["overrides"]
            for t in o["opd"]["turns"]
            if t["status"] == "teacher_error"
        ]
        expected = {
            "teacher-400": "MaxLogprobsTooLowError",
            "teacher-malformed": "UnexpectedResponseError",
            "teacher-nan": "invalid logprob nan",
        }[mode]
        assert all(expected in e for e in errors), errors
        assert group["scores"] and group["tokens"], "GRPO data survives"


async def test_teacher_with_another_tokenizer_is_refused(dev_server, tmp_path):
    async with FaultyEndpoint("teacher-400") as teacher:
        env = make_env(dev_server, tmp_path, teacher_base_url=teacher.base_url, teacher_model="teacher")
        with pytest.raises(TeacherTokenizerMismatchError, match="OPD needs the same tokenizer"):
            await env.setup()
