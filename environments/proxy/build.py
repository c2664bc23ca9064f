"""Assemble a proxy from its config: the tokenizer, the one OPD pipeline (built like the env's,
environments/pipeline/build.py), the sample feed and its group file."""

from __future__ import annotations

import logging
from typing import Any

from environments.pipeline.build import build_opd_pipeline
from environments.pipeline.role_servers import (
    PROXY_SETTINGS,
    RoleServer,
    RoleServers,
    describe_role_servers,
    follow_live_adapter,
    resolve_roles,
)
from environments.proxy.group_sink import AtroposSink, GroupFileSink
from environments.proxy.proxy_config import ProxyConfig
from environments.proxy.sample_feed import FeedSettings, SampleFeed
from environments.proxy.server import ProxyServer
from hermes_opd.vllm_api.client import VLLMCompletionsClient

logger = logging.getLogger(__name__)


def load_tokenizer(path: str) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path)


def proxy_role_servers(config: ProxyConfig) -> RoleServers:
    """The proxy's roles, by the env's one rule (environments/pipeline/role_servers.py): the
    teacher and an llm judge default to the policy server, the process judge to the hint judge's."""
    policy = RoleServer(
        "policy",
        config.policy_base_url,
        config.policy_model,
        config.policy_api_key,
        url_setting="policy_base_url",
        model_setting="policy_model",
    )
    return resolve_roles(config.opd, [policy], PROXY_SETTINGS)


async def build_proxy(config: ProxyConfig, tokenizer: Any | None = None) -> ProxyServer:
    """A proxy ready to serve (call `run_app`). The teacher and an llm judge default to the policy
    server; a teacher that shares it scores with the adapter that is live when the turn is scored."""
    tokenizer = tokenizer if tokenizer is not None else load_tokenizer(config.tokenizer)
    client = VLLMCompletionsClient(
        config.policy_base_url, config.policy_model, config.policy_api_key, timeout_s=600.0
    )
    if not config.train:
        return ProxyServer(config, tokenizer, None, client)
    opd = config.opd
    roles = proxy_role_servers(config)
    logger.info("%s", describe_role_servers(roles))
    pipeline = None
    if opd.enabled or opd.prm.enabled:
        pipeline = await build_opd_pipeline(
            tokenizer,
            opd,
            roles.teacher.endpoint,
            roles.judge.endpoint,
            prm_judge_server=roles.prm_judge_endpoint,
        )
    if config.atropos_url:
        sink: GroupFileSink | AtroposSink = AtroposSink(
            config.atropos_url, config.spool_dir or config.groups_path + ".spool"
        )
        flush_sink, batch_size = sink.flush, sink.batch_size
    else:  # GroupFileSink refuses a groups_path it cannot write (GroupsPathError) here, at start-up
        sink, flush_sink, batch_size = GroupFileSink(config.groups_path), None, None
    whole_groups = bool(config.atropos_url) if config.whole_groups is None else config.whole_groups
    settings = FeedSettings(
        queue_size=config.queue_size,
        workers=config.workers,
        samples_per_group=config.samples_per_group,
        group_wait_s=config.group_wait_s,
        retry_window_s=config.retry_window_s,
        retry_backoff_s=config.retry_backoff_s,
        whole_groups=whole_groups,
        pending_path=config.pending_turns_path or config.groups_path + ".pending-turns.jsonl",
    )
    server: ProxyServer | None = None

    async def follow_policy() -> None:
        if server is not None:
            follow_live_adapter(pipeline, roles, server.weights.model)

    feed = SampleFeed(
        pipeline,
        opd,
        sink.write,
        settings,
        lambda: server.weights.version if server else 0,
        before_process=follow_policy,
        flush_sink=flush_sink,
        batch_size=batch_size,
    )
    server = ProxyServer(config, tokenizer, feed, client)
    return server
