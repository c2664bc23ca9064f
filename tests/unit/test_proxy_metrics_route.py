"""The proxy's `/metrics` is Prometheus text that `prometheus_client`'s own parser reads, with the
same figures as `/metrics.json`, including how the rules judges read the users' replies."""

from __future__ import annotations

from aiohttp.test_utils import TestClient, TestServer
from prometheus_client.parser import text_string_to_metric_families

from environments.proxy.build import build_proxy
from environments.proxy.proxy_config import ProxyConfig


async def test_metrics_is_prometheus_text_and_json_is_kept(dev_model_dir, dev_tokenizer, tmp_path):
    config = ProxyConfig(
        policy_base_url="http://127.0.0.1:9/v1",
        policy_model="dev-model",
        tokenizer=str(dev_model_dir),
        groups_path=str(tmp_path / "g.jsonl"),
        opd={"enabled": False, "prm": {"enabled": True, "judge": {"backend": "rules"}}},
    )
    server = await build_proxy(config, dev_tokenizer)
    server.service.counts["requests"] += 3
    server.feed.pipeline.prm_judge.feedback_tally.record(["unread", "acceptance"])
    client = TestClient(TestServer(server.app))
    await client.start_server()
    try:
        response = await client.get("/metrics")
        assert response.status == 200 and response.headers["Content-Type"].startswith("text/plain")
        families = {f.name: f for f in text_string_to_metric_families(await response.text())}
        samples = {s.name: s.value for f in families.values() for s in f.samples}
        assert samples["hermes_opd_proxy_requests_total"] == 3
        assert samples["hermes_opd_proxy_prm_judge_user_feedback_unread_total"] == 1
        assert samples["hermes_opd_proxy_prm_judge_user_feedback_acceptance_total"] == 1
        assert samples["hermes_opd_proxy_sessions"] == 0
        as_json = await (await client.get("/metrics.json")).json()
        assert as_json["counts"]["requests"] == 3 and as_json["counts"]["prm_judge_user_feedback_unread"] == 1
    finally:
        await client.close()
        await server.client.close()
        await server.feed.pipeline.aclose()
