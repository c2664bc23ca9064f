"""Build the one OPD pipeline from its config and resolved endpoints: the teacher's client and
scorer (with its tokenizer check and path choice) and the judge backend. Every producer of samples
(the env's rollouts, the proxy's live sessions) builds its pipeline here, so both score turns with
the same parts configured the same way."""

from __future__ import annotations

from typing import Any

from environments.pipeline.opd_config import OPDConfig
from environments.pipeline.opd_pipeline import OPDPipeline
from hermes_opd.contract.errors import ConfigError
from hermes_opd.vllm_api.client import RetryPolicy, VLLMCompletionsClient
from hermes_opd.vllm_api.endpoint import Endpoint
from judge.make_backend import make_judge_backend
from scoring.teacher import TeacherScorer


async def build_opd_pipeline(
    tokenizer: Any,
    opd: OPDConfig,
    teacher_server: Endpoint | None,
    judge_server: Endpoint | None,
    *,
    prm_judge_server: Endpoint | None = None,
) -> OPDPipeline:
    """The pipeline for `opd`, scoring with the teacher at `teacher_server` and judging with the
    backend `opd.judge` names (an llm judge at `judge_server`); with `opd.prm.enabled`, also the
    process-reward judge `opd.prm.judge` names (an llm one at `prm_judge_server`). With OPD off and
    the process reward on, the pipeline has no hint judge and no teacher."""
    prm_judge = make_judge_backend(opd.prm.judge, prm_judge_server, kind="prm") if opd.prm.enabled else None
    if not opd.enabled:  # process reward alone: no hint judge, no teacher
        return OPDPipeline(tokenizer, None, None, opd, prm_judge=prm_judge)
    if teacher_server is None:
        raise ConfigError("OPD needs a teacher server: set env.teacher_base_url or a policy server")
    teacher_client = VLLMCompletionsClient(
        base_url=teacher_server.base_url,
        model=teacher_server.model,
        api_key=teacher_server.api_key,
        timeout_s=opd.teacher.timeout_s,
        retry=RetryPolicy(max_attempts=opd.teacher.max_attempts),
    )
    teacher = TeacherScorer(
        teacher_client,
        k=opd.distill_topk,
        concurrency=opd.teacher.concurrency,
        timeout_s=opd.teacher.timeout_s,
        path=opd.teacher.path,
        max_positions_in_flight=opd.teacher.max_positions_in_flight,
        local_model_dir=opd.teacher.local_model_dir,
    )
    try:
        if opd.teacher.check_tokenizer:
            await teacher.check_tokenizer(tokenizer)
        await teacher.choose_path()  # one log line: which path scores the turns, and why
    except BaseException:
        await teacher.aclose()
        raise
    judge = make_judge_backend(opd.judge, judge_server)
    return OPDPipeline(tokenizer, judge, teacher, opd, prm_judge=prm_judge)
