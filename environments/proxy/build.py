"""Assemble a proxy from its config: the tokenizer, the one OPD pipeline (built like the env's,
environments/pipeline/build.py), the sample feed and its group file."""

from __future__ import annotations

from typing import Any

from environments.pipeline.build import build_opd_pipeline
from environments.proxy.group_sink import AtroposSink, GroupFileSink
from environments.proxy.proxy_config import ProxyConfig
from environments.proxy.sample_feed import FeedSettings, SampleFeed
from environments.proxy.server import ProxyServer
from hermes_opd.vllm_api.client import VLLMCompletionsClient
from hermes_opd.vllm_api.endpoint import Endpoint
from judge.config import JudgeConfig


def load_tokenizer(path: str) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path)


def _llm_judge_server(judge: JudgeConfig, policy: Endpoint) -> Endpoint | None:
    """An llm judge's server: its own base_url/model where set, else the policy server's."""
    if judge.backend != "llm":
        return None
    return Endpoint(judge.base_url or policy.base_url, judge.model or policy.model,
                    judge.resolved_api_key() if judge.base_url else policy.api_key)  # fmt: skip


async def build_proxy(config: ProxyConfig, tokenizer: Any | None = None) -> ProxyServer:
    """A proxy ready to serve (call `run_app`). The teacher and an llm judge default to the policy
    server; a teacher that shares it scores with the adapter that is live when the turn is scored."""
    tokenizer = tokenizer if tokenizer is not None else load_tokenizer(config.tokenizer)
    client = VLLMCompletionsClient(config.policy_base_url, config.policy_model, config.policy_api_key,
                                   timeout_s=600.0)  # fmt: skip
    if not config.train:
        return ProxyServer(config, tokenizer, None, client)
    opd = config.opd
    policy = Endpoint(config.policy_base_url, config.policy_model, config.policy_api_key)
    teacher = Endpoint(opd.teacher.base_url or policy.base_url, opd.teacher.model or policy.model,
                       opd.teacher.api_key if opd.teacher.base_url else policy.api_key)  # fmt: skip
    judge = _llm_judge_server(opd.judge, policy)
    prm_judge = _llm_judge_server(opd.prm.judge, policy) if opd.prm.enabled else None
    pipeline = None
    if opd.enabled or opd.prm.enabled:
        pipeline = await build_opd_pipeline(tokenizer, opd, teacher, judge, prm_judge_server=prm_judge)
    if config.atropos_url:
        sink: GroupFileSink | AtroposSink = AtroposSink(
            config.atropos_url, config.spool_dir or config.groups_path + ".spool"
        )
        flush_sink = sink.flush
    else:
        sink, flush_sink = GroupFileSink(config.groups_path), None
    settings = FeedSettings(queue_size=config.queue_size, workers=config.workers,
                            samples_per_group=config.samples_per_group, group_wait_s=config.group_wait_s,
                            retry_window_s=config.retry_window_s, retry_backoff_s=config.retry_backoff_s)  # fmt: skip
    server: ProxyServer | None = None

    async def follow_policy() -> None:
        if (
            pipeline is not None
            and pipeline.teacher is not None  # PRM alone has no teacher
            and server is not None
            and opd.teacher.base_url is None
            and opd.teacher.model is None
        ):
            pipeline.teacher.client.model = server.weights.model

    feed = SampleFeed(pipeline, opd, sink.write, settings, lambda: server.weights.version if server else 0,
                      before_process=follow_policy, flush_sink=flush_sink)  # fmt: skip
    server = ProxyServer(config, tokenizer, feed, client)
    return server
