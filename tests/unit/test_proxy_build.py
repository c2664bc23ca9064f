"""`build_proxy` with the process reward alone (no hint judge, no teacher) and live weights: the
feed's pre-step, which points a teacher that shares the policy server at the live adapter, must
leave a pipeline without a teacher alone (it raised AttributeError on every turn, so a PRM-only
proxy with `policy_lora_prefix` lost every sample)."""

from __future__ import annotations

from environments.delivery.policy_adapter import PolicyWeights
from environments.proxy.build import build_proxy
from environments.proxy.proxy_config import ProxyConfig


async def test_prm_alone_with_live_weights_has_no_teacher_to_follow(dev_model_dir, dev_tokenizer, tmp_path):
    config = ProxyConfig(
        policy_base_url="http://127.0.0.1:9/v1",
        policy_model="dev-model",
        tokenizer=str(dev_model_dir),
        groups_path=str(tmp_path / "g.jsonl"),
        policy_lora_prefix="live",
        opd={"enabled": False, "prm": {"enabled": True, "judge": {"backend": "rules"}}},
    )
    server = await build_proxy(config, dev_tokenizer)
    try:
        assert server.feed.pipeline is not None and server.feed.pipeline.teacher is None
        server.weights = PolicyWeights("live-step3", 3)
        await server.feed.before_process()  # raised AttributeError before the fix
    finally:
        await server.client.close()
        await server.feed.pipeline.aclose()
