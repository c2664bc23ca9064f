"""The policy version of a group: adapter names per step, the env's newest-adapter choice, the
trainer's per-step sync (load new, unload old) and the lag it logs."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from environments.delivery.policy_adapter import PolicyAdapterTracker, PolicyWeights
from hermes_opd.contract.policy_version import POLICY_VERSION_KEY, adapter_name, adapter_step, newest_adapter
from trainer_adapters.policy_lag import policy_lag_metrics, split_stale, stale_metrics
from trainer_adapters.weight_sync import WeightSyncError, vllm_lora_step_sync


def test_adapter_names_round_trip_and_the_newest_is_chosen_by_step_not_by_text():
    assert adapter_name("policy", 12) == "policy-step12"
    assert adapter_step("policy", "policy-step12") == 12
    assert adapter_step("policy", "policy-step") is None
    assert adapter_step("policy", "other-step3") is None
    assert adapter_step("pol.cy", "polXcy-step3") is None  # the prefix is literal, not a regex
    served = ["dev-model", "policy-step9", "policy-step10", "policyx-step99"]
    assert newest_adapter("policy", served) == ("policy-step10", 10)
    assert newest_adapter("policy", ["dev-model"]) is None
    with pytest.raises(ValueError, match="step must be >= 0"):
        adapter_name("policy", -1)


def test_step_sync_loads_a_new_name_each_step_and_unloads_beyond_keep(tmp_path):
    seen = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append((request.url.path, json.loads(request.content)))
        return httpx.Response(200, text="ok")

    sync = vllm_lora_step_sync(
        "http://vllm/", "policy", keep_adapters=2, timeout_s=5, transport=httpx.MockTransport(handler)
    )
    for step in (1, 2, 3):
        sync(tmp_path / f"step_{step:08d}", step)
    assert seen == [
        (
            "/v1/load_lora_adapter",
            {"lora_name": "policy-step1", "lora_path": str((tmp_path / "step_00000001" / "model").resolve())},
        ),
        (
            "/v1/load_lora_adapter",
            {"lora_name": "policy-step2", "lora_path": str((tmp_path / "step_00000002" / "model").resolve())},
        ),
        (
            "/v1/load_lora_adapter",
            {"lora_name": "policy-step3", "lora_path": str((tmp_path / "step_00000003" / "model").resolve())},
        ),
        ("/v1/unload_lora_adapter", {"lora_name": "policy-step1"}),
    ]
    assert all("load_inplace" not in body for _, body in seen)


def test_step_sync_fails_on_a_refused_load_but_not_on_a_refused_unload(tmp_path, caplog):
    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        if request.url.path.endswith("unload_lora_adapter"):
            return httpx.Response(404, text="gone already")
        if body["lora_name"] == "policy-step3":
            return httpx.Response(400, text="rank too large")
        return httpx.Response(200)

    sync = vllm_lora_step_sync(
        "http://vllm", "policy", keep_adapters=1, timeout_s=5, transport=httpx.MockTransport(handler)
    )
    sync(tmp_path / "a", 1)
    sync(tmp_path / "b", 2)
    assert "unload_lora_adapter 'policy-step1' answered 404: gone already" in caplog.text
    with pytest.raises(
        WeightSyncError, match="load_lora_adapter 'policy-step3' answered 400: rank too large"
    ):
        sync(tmp_path / "c", 3)


def test_lag_is_trainer_step_minus_the_sampling_version():
    groups = [{"group_overrides": {POLICY_VERSION_KEY: v}} for v in (3, 5, 5)] + [{"group_overrides": {}}, {}]
    assert policy_lag_metrics(groups, 5) == {
        "policy/unversioned_groups": 2.0,
        "policy/lag_mean": pytest.approx(2 / 3),
        "policy/lag_min": 0.0,
        "policy/lag_max": 2.0,
        "policy/lag_0_groups": 2.0,
        "policy/lag_2_groups": 1.0,
    }
    assert policy_lag_metrics([{}], 0) == {"policy/unversioned_groups": 1.0}
    with pytest.raises(ValueError, match="policy version 6, ahead of the trainer's step 5"):
        policy_lag_metrics([{"group_overrides": {POLICY_VERSION_KEY: 6}}], 5)


def test_split_stale_keeps_groups_within_the_bound_and_unversioned_ones():
    groups = [{"group_overrides": {POLICY_VERSION_KEY: v}} for v in (1, 3, 4, 5)] + [{}]
    kept, dropped = split_stale(groups, 5, 1)
    assert kept == [groups[2], groups[3], groups[4]] and dropped == [4, 2]
    assert split_stale(groups, 5, None) == (groups, [])
    assert split_stale(groups, 5, 0)[1] == [4, 2, 1]
    assert stale_metrics([4, 2], 7) == {
        "policy/stale_groups_dropped": 2.0,
        "policy/stale_lag_max": 4.0,
        "policy/stale_groups_dropped_total": 7.0,
    }
    assert stale_metrics([], 0)["policy/stale_lag_max"] == 0.0


class _ServedModels:
    def __init__(self, served):
        self.model = "dev-model"
        self.served = served

    async def served_models(self):
        return list(self.served)


def test_env_tracker_follows_the_newest_adapter_and_never_goes_back():
    client = _ServedModels(["dev-model"])
    tracker = PolicyAdapterTracker(client, "policy")

    async def run():
        seen = [await tracker.current()]
        client.served = ["dev-model", "policy-step1"]
        seen.append(await tracker.current())
        client.served = ["dev-model", "policy-step2", "policy-step3"]
        seen.append(await tracker.current())
        client.served = []  # a failed /v1/models answer lists nothing: keep the newest known
        seen.append(await tracker.current())
        return seen

    assert asyncio.run(run()) == [
        PolicyWeights("dev-model", 0),
        PolicyWeights("policy-step1", 1),
        PolicyWeights("policy-step3", 3),
        PolicyWeights("policy-step3", 3),
    ]
    assert asyncio.run(PolicyAdapterTracker(client, None).current()) == PolicyWeights("dev-model", 0)


def test_the_server_wrapper_sends_the_adapter_name_atroposlib_would_overwrite():
    """atroposlib sets kwargs["model"] to the configured name on every call, so the env passes the
    adapter as `policy_model`; the request then names the adapter, with every sampling parameter."""
    from atroposlib.envs.server_handling.server_baseline import APIServerConfig

    from environments.atropos.server import CurrentVLLMServer
    from hermes_opd.vllm_api.sampling_params import ENFORCED_SAMPLING_PARAMS

    server = CurrentVLLMServer(
        APIServerConfig(
            base_url="http://127.0.0.1:9/v1",
            model_name="dev-model",
            api_key="EMPTY",
            timeout=5,
            health_check=False,
        )
    )
    payloads = []

    async def post(path, payload):
        payloads.append((path, payload))
        return {
            "choices": [{"token_ids": [7], "logprobs": {"token_logprobs": [-0.5]}, "finish_reason": "stop"}]
        }

    server.client.post = post
    for adapter in ("policy-step4", None):
        kwargs = {"policy_model": adapter} if adapter else {}
        asyncio.run(
            server._tokens_and_logprobs_completion_wrapper(
                model="dev-model", input_ids=[1, 2], n=1, max_tokens=3, **kwargs
            )
        )
    (path, with_adapter), (_, plain) = payloads
    assert path == "/completions"
    assert (with_adapter["model"], plain["model"]) == ("policy-step4", "dev-model")
    assert set(ENFORCED_SAMPLING_PARAMS) <= set(with_adapter) and "policy_model" not in with_adapter
