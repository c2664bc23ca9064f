"""The reference torch trainer end to end: real Atropos API, tiny random Qwen2, checkpoints, sync."""

from __future__ import annotations

import json
import math
import sys
import threading
from pathlib import Path

import httpx
import numpy as np
import pytest
import torch
import yaml

from hermes_opd.contract.errors import ConfigError
from hermes_opd.contract.policy_version import POLICY_VERSION_KEY
from tests.support.torch_trainer import make_config, make_group
from tests.support.waiting import wait_until
from trainer_adapters.atropos_client import AtroposClient, AtroposError, Backoff, Registration
from trainer_adapters.checkpointing import latest_checkpoint, list_checkpoints
from trainer_adapters.train_cli import main as train_main
from trainer_adapters.trainer_config import TorchTrainerConfig, load_trainer_config, parse_trainer_config
from trainer_adapters.weight_sync import WeightSyncError, vllm_lora_sync

# --- synthetic data: a fixed teacher rule the student can learn -------------------------------


def heldout_groups() -> list[dict]:
    return [make_group(np.random.default_rng(1000 + i)) for i in range(2)]


# --- the real Atropos API ---------------------------------------------------------------------


def test_cli_trains_from_the_real_api_and_opd_kl_drops_on_heldout(run_api, tiny_model_dir, tmp_path):
    atropos_api = run_api.url
    config = make_config(tiny_model_dir, tmp_path, optim__lr=1e-2, atropos__url=atropos_api)
    config_path = tmp_path / "trainer.yaml"
    config_path.write_text(yaml.safe_dump(config.model_dump(mode="json")))
    from trainer_adapters.torch_trainer import TorchTrainer

    kl_before = TorchTrainer(config).evaluate(heldout_groups())["opd/reverse_kl"]

    result: dict[str, int] = {}
    thread = threading.Thread(target=lambda: result.update(rc=train_main(["--config", str(config_path)])))
    thread.start()
    registered = lambda: httpx.get(atropos_api + "/info", timeout=5).json()["batch_size"] == 8  # noqa: E731
    wait_until(registered, 60, "trainer did not register", alive=thread.is_alive)
    rng = np.random.default_rng(0)
    queue_empty = lambda: httpx.get(atropos_api + "/status", timeout=5).json()["queue_size"] == 0  # noqa: E731
    for _ in range(config.num_steps):  # an env posting groups of 4; a batch is 8 sequences
        # one batch at a time, so every run trains on the same batches (with all twelve groups
        # queued at once, which two made a batch varied, and the KL after 6 steps with it: 0.59-0.86x)
        for _ in range(2):
            response = httpx.post(atropos_api + "/scored_data", json=make_group(rng), timeout=10)
            assert response.status_code == 200, response.text
        wait_until(queue_empty, 120, "the trainer did not take its batch", alive=thread.is_alive)
    thread.join(timeout=300)
    assert not thread.is_alive() and result["rc"] == 0

    records = [json.loads(line) for line in Path(config.logging.metrics_path).read_text().splitlines()]
    assert [r["step"] for r in records] == [1, 2, 3, 4, 5, 6]
    for record in records:
        for key in ("loss/total", "loss/grpo", "loss/opd", "opd/reverse_kl", "opd/forward_kl", "grad_norm"):
            assert math.isfinite(record[key]), key
        assert record["batch/sequences"] == 8 and record["batch/teacher_positions"] == 8 * 12
    assert [p.name for p in list_checkpoints(Path(config.checkpoint.dir))] == [
        "step_00000003",
        "step_00000006",
    ]
    assert httpx.get(atropos_api + "/status", timeout=5).json()["queue_size"] == 0

    resumed = TorchTrainer(config)  # picks up step_00000006
    assert resumed.step == 6
    kl_after = resumed.evaluate(heldout_groups())["opd/reverse_kl"]
    assert kl_after < 0.85 * kl_before, (kl_before, kl_after)  # measured: 2.210 -> 1.295 every run


# --- checkpoints and resume -------------------------------------------------------------------


def _params(model) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}


@pytest.mark.parametrize("lora", [False, True])
def test_checkpoint_resume_continues_exactly(tiny_model_dir, tmp_path, lora):
    from trainer_adapters.torch_trainer import TorchTrainer

    overrides = (
        {"model__lora": {"enabled": True, "r": 4, "alpha": 8, "target_modules": ["q_proj", "v_proj"]}}
        if lora
        else {}
    )
    config = make_config(tiny_model_dir, tmp_path, **overrides)
    rng = np.random.default_rng(5)
    first, second = [make_group(rng), make_group(rng)], [make_group(rng), make_group(rng)]

    original = TorchTrainer(config)
    assert original.step == 0 and original.resumed_from is None
    original.train_step(first)
    saved = original.save_checkpoint()
    params_at_1 = _params(original.model)
    original.train_step(second)
    params_at_2 = _params(original.model)

    model_dir = saved / "model"
    assert (model_dir / "adapter_config.json").is_file() == lora
    assert (model_dir / "model.safetensors").is_file() == (not lora)

    resumed = TorchTrainer(config)
    assert resumed.step == 1 and resumed.resumed_from == saved
    for name, value in _params(resumed.model).items():
        torch.testing.assert_close(value, params_at_1[name], rtol=0, atol=0, msg=name)
    state_a = original.optimizer.state_dict()["state"]
    assert set(resumed.optimizer.state_dict()["state"]) == set(state_a)
    resumed.train_step(second)
    assert resumed.step == 2
    for name, value in _params(resumed.model).items():
        torch.testing.assert_close(value, params_at_2[name], rtol=1e-5, atol=1e-6, msg=name)


def test_checkpoints_are_pruned_and_incomplete_ones_ignored(tiny_model_dir, tmp_path):
    from trainer_adapters.torch_trainer import TorchTrainer

    config = make_config(tiny_model_dir, tmp_path, checkpoint__keep_last=2)
    trainer = TorchTrainer(config)
    for _ in range(3):
        trainer.step += 1
        trainer.save_checkpoint()
    root = Path(config.checkpoint.dir)
    assert [p.name for p in list_checkpoints(root)] == ["step_00000002", "step_00000003"]
    (root / "step_00000009").mkdir()  # a crashed save never renamed into place looks like this
    (root / ".step_00000010.tmp").mkdir()
    assert latest_checkpoint(root).name == "step_00000003"


def test_checkpoints_at_a_multiple_of_keep_every_are_never_pruned(tiny_model_dir, tmp_path):
    from trainer_adapters.torch_trainer import TorchTrainer

    config = make_config(tiny_model_dir, tmp_path, checkpoint__keep_last=1, checkpoint__keep_every=3)
    trainer = TorchTrainer(config)
    for _ in range(7):
        trainer.step += 1
        trainer.save_checkpoint()
    kept = [p.name for p in list_checkpoints(Path(config.checkpoint.dir))]
    assert kept == ["step_00000003", "step_00000006", "step_00000007"]


# --- temperature and accumulation -------------------------------------------------------------


def test_student_logprobs_are_at_temperature_one_by_default(tiny_model_dir, tmp_path):
    from trainer_adapters.torch_trainer import TorchTrainer

    groups = [make_group(np.random.default_rng(7))]
    for temperature in (None, 2.0):
        config = make_config(
            tiny_model_dir, tmp_path, **({"loss__student_temperature": temperature} if temperature else {})
        )
        trainer = TorchTrainer(config)
        batch = trainer.collate(groups)
        got = trainer.student_logprobs(batch).token_logprobs_BT
        with torch.no_grad():
            logits = trainer.model(
                input_ids=batch.input_ids_BT, attention_mask=batch.attention_mask_BT.long()
            ).logits
        want = torch.log_softmax(logits / (temperature or 1.0), -1).gather(
            -1, batch.target_ids_BT[..., None]
        )[..., 0]
        torch.testing.assert_close(got.detach(), want, atol=1e-5, rtol=1e-5)
    assert TorchTrainerConfig.model_fields["loss"].default_factory().student_temperature == 1.0


def test_gradient_does_not_depend_on_micro_batch_size_or_chunking(tiny_model_dir, tmp_path):
    from trainer_adapters.torch_trainer import TorchTrainer

    rng = np.random.default_rng(8)
    groups = [make_group(rng), make_group(rng, gen_len=7)]  # ragged lengths across micro-batches
    grads = []
    # the last variant also computes the log-softmax over T-chunks of 5 (checkpointed)
    for micro, chunk in ((1, None), (3, None), (8, None), (3, 5)):
        config = make_config(
            tiny_model_dir, tmp_path, optim__micro_batch_size=micro, optim__logprob_chunk_size=chunk
        )
        trainer = TorchTrainer(config)
        metrics = trainer.accumulate_gradients(groups)
        grads.append(({n: p.grad.clone() for n, p in trainer.model.named_parameters()}, metrics))
    for other, metrics in grads[1:]:
        for name, grad in grads[0][0].items():
            torch.testing.assert_close(other[name], grad, atol=1e-6, rtol=1e-4, msg=name)
        assert metrics["loss/opd"] == pytest.approx(grads[0][1]["loss/opd"], rel=1e-5)
        assert metrics["loss/grpo"] == pytest.approx(grads[0][1]["loss/grpo"], rel=1e-4, abs=1e-7)


def test_too_long_sequence_is_rejected(tiny_model_dir, tmp_path):
    from trainer_adapters.torch_trainer import TorchTrainer

    trainer = TorchTrainer(make_config(tiny_model_dir, tmp_path, atropos__max_token_len=10))
    with pytest.raises(ValueError, match="16 tokens, more than atropos.max_token_len=10"):
        trainer.train_step([make_group(np.random.default_rng(9))])
    assert trainer.step == 0


# --- the run loop and weight sync -------------------------------------------------------------


class FakeAtropos:
    """Stands in for AtroposClient in run(): hands out prepared batches."""

    def __init__(self, batches: list[list[dict]]) -> None:
        self.batches = list(batches)
        self.registrations: list[Registration] = []

    def register(self, registration: Registration) -> int:
        self.registrations.append(registration)
        return 1

    def wait_for_batch(self, *, timeout_s: float) -> list[dict]:
        return self.batches.pop(0)


def test_run_syncs_weights_through_a_command(tiny_model_dir, tmp_path):
    from trainer_adapters.torch_trainer import TorchTrainer

    out = tmp_path / "synced.txt"
    script = "import sys; open(sys.argv[1], 'a').write(sys.argv[2] + ' ' + sys.argv[3] + '\\n')"
    config = make_config(
        tiny_model_dir,
        tmp_path,
        weight_sync__mode="command",
        weight_sync__every_steps=2,
        weight_sync__command=[sys.executable, "-c", script, str(out), "{checkpoint}", "{step}"],
    )
    config = config.model_copy(update={"num_steps": 4})
    rng = np.random.default_rng(10)
    fake = FakeAtropos([[make_group(rng), make_group(rng)] for _ in range(4)])
    assert TorchTrainer(config).run(client=fake) == 4
    lines = out.read_text().splitlines()
    root = Path(config.checkpoint.dir).resolve()
    assert lines == [f"{root / 'step_00000002' / 'model'} 2", f"{root / 'step_00000004' / 'model'} 4"]
    assert fake.registrations[0].starting_step == 0 and fake.registrations[0].batch_size == 8


def _versioned(group: dict, version: int) -> dict:
    return {**group, "group_overrides": {POLICY_VERSION_KEY: version}}


def test_groups_older_than_max_policy_lag_are_dropped_counted_and_not_trained(tiny_model_dir, tmp_path):
    from trainer_adapters.torch_trainer import TorchTrainer

    rng = np.random.default_rng(14)
    config = make_config(tiny_model_dir, tmp_path).model_copy(update={"num_steps": 3})
    assert config.atropos.max_policy_lag == 1  # on by default
    batches = [
        [_versioned(make_group(rng), 0), _versioned(make_group(rng), 0)],  # step 0: lag 0, 0
        [_versioned(make_group(rng), 0), _versioned(make_group(rng), 1)],  # step 1: lag 1, 0
        [_versioned(make_group(rng), 0), _versioned(make_group(rng), 0)],  # step 2: lag 2, 2: no step
        [_versioned(make_group(rng), 0), _versioned(make_group(rng), 2), make_group(rng)],  # lag 2, 0, ?
    ]
    trainer = TorchTrainer(config)
    assert trainer.run(client=FakeAtropos(batches)) == 3
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3]
    lag_keys = ("policy/lag_0_groups", "policy/lag_1_groups", "policy/lag_2_groups")
    assert [[r.get(k) for k in lag_keys] for r in rows] == [
        [2.0, None, None],
        [1.0, 1.0, None],
        [1.0, None, None],
    ]
    assert [r["policy/stale_groups_dropped"] for r in rows] == [0.0, 0.0, 3.0]  # 2 whole, 1 of the last
    assert [r["policy/stale_lag_max"] for r in rows] == [0.0, 0.0, 2.0]
    assert [r["policy/stale_groups_dropped_total"] for r in rows] == [0.0, 0.0, 3.0]
    assert rows[2]["policy/unversioned_groups"] == 1.0  # kept: its lag is unknown
    assert trainer.stale_dropped_total == 3


def test_max_policy_lag_none_trains_every_group_as_before(tiny_model_dir, tmp_path):
    from trainer_adapters.torch_trainer import TorchTrainer

    rng = np.random.default_rng(15)
    config = make_config(tiny_model_dir, tmp_path, atropos__max_policy_lag=None)
    config = config.model_copy(update={"num_steps": 3})
    batches = [[_versioned(make_group(rng), 0), _versioned(make_group(rng), 0)] for _ in range(3)]
    assert TorchTrainer(config).run(client=FakeAtropos(batches)) == 3
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["policy/lag_max"] for r in rows] == [0.0, 1.0, 2.0]
    assert [r["policy/stale_groups_dropped_total"] for r in rows] == [0.0, 0.0, 0.0]


def test_failed_command_sync_stops_training_unless_told_otherwise(tiny_model_dir, tmp_path):
    from trainer_adapters.torch_trainer import TorchTrainer

    rng = np.random.default_rng(11)
    for fail_on_error in (True, False):
        config = make_config(
            tiny_model_dir,
            tmp_path / str(fail_on_error),
            weight_sync__mode="command",
            weight_sync__command=[sys.executable, "-c", "import sys; sys.exit('reload refused')"],
            weight_sync__fail_on_error=fail_on_error,
        ).model_copy(update={"num_steps": 2})
        fake = FakeAtropos([[make_group(rng), make_group(rng)] for _ in range(2)])
        trainer = TorchTrainer(config)
        if fail_on_error:
            with pytest.raises(WeightSyncError, match="reload refused"):
                trainer.run(client=fake)
            assert trainer.step == 1
        else:
            assert trainer.run(client=fake) == 2


def test_vllm_lora_sync_posts_the_adapter(tmp_path):
    seen = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append((request.url.path, json.loads(request.content)))
        return httpx.Response(200, text="ok") if len(seen) == 1 else httpx.Response(404, text="no such lora")

    sync = vllm_lora_sync(
        "http://vllm", "policy", load_inplace=True, timeout_s=5, transport=httpx.MockTransport(handler)
    )
    sync(tmp_path / "step_00000003", 3)
    path, body = seen[0]
    assert path == "/v1/load_lora_adapter"
    assert body == {
        "lora_name": "policy",
        "lora_path": str((tmp_path / "step_00000003" / "model").resolve()),
        "load_inplace": True,
    }
    with pytest.raises(WeightSyncError, match="answered 404: no such lora"):
        sync(tmp_path / "step_00000004", 4)


# --- the Atropos client -----------------------------------------------------------------------


def _client(handler, sleeps: list[float]) -> AtroposClient:
    return AtroposClient(
        "http://api",
        backoff=Backoff(initial_s=0.5, maximum_s=1.5, jitter=0.0),
        sleep=sleeps.append,
        transport=httpx.MockTransport(handler),
    )


def test_wait_for_batch_backs_off_until_a_batch_arrives():
    answers = iter([{"batch": None}, {"batch": None}, {"batch": None}, {"batch": [{"tokens": [[1, 2]]}]}])
    sleeps: list[float] = []
    client = _client(lambda request: httpx.Response(200, json=next(answers)), sleeps)
    assert client.wait_for_batch(timeout_s=60) == [{"tokens": [[1, 2]]}]
    assert sleeps == [0.5, 1.0, 1.5]


def test_client_errors_are_explicit():
    sleeps: list[float] = []
    unregistered = _client(
        lambda r: httpx.Response(
            200, json={"status": "error", "message": "Trainer not registered.", "batch": []}
        ),
        sleeps,
    )
    with pytest.raises(AtroposError, match="Trainer not registered"):
        unregistered.get_batch()
    broken = _client(lambda r: httpx.Response(500, text="Internal Server Error"), sleeps)
    with pytest.raises(AtroposError, match="GET /batch answered 500"):
        broken.get_batch()
    empty = _client(lambda r: httpx.Response(200, json={"batch": None}), sleeps)
    with pytest.raises(TimeoutError, match="no batch from http://api/batch"):
        empty.wait_for_batch(timeout_s=0.0)


def test_register_retries_until_the_api_is_up():
    calls = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(json.loads(request.content))
        if len(calls) < 3:
            raise httpx.ConnectError("connection refused")
        return httpx.Response(200, json={"uuid": 42})

    sleeps: list[float] = []
    client = _client(handler, sleeps)
    registration = Registration("g", "p", 8, 64, "/ckpt", 3, 0, 6)
    assert client.register(registration, wait_s=60) == 42
    assert calls[-1] == {
        "wandb_group": "g",
        "wandb_project": "p",
        "batch_size": 8,
        "max_token_len": 64,
        "checkpoint_dir": "/ckpt",
        "save_checkpoint_interval": 3,
        "starting_step": 0,
        "num_steps": 6,
    }
    assert sleeps == [0.5, 1.0]


def test_registration_matches_atroposlib_schema():
    from atroposlib.api.server import Registration as ServerRegistration

    assert set(ServerRegistration.model_fields) == set(Registration.__dataclass_fields__)


# --- configs and the CLI ----------------------------------------------------------------------


def _fields_without_description(model, prefix="") -> list[str]:
    missing = []
    for name, info in model.model_fields.items():
        if not info.description:
            missing.append(prefix + name)
        annotation = info.annotation
        if isinstance(annotation, type) and hasattr(annotation, "model_fields"):
            missing += _fields_without_description(annotation, f"{prefix}{name}.")
    return missing


def test_shipped_configs_load_and_every_field_is_described():
    from trainer_adapters.trainer_config import TinkerTrainerConfig

    root = Path(__file__).resolve().parents[2] / "configs"
    assert isinstance(load_trainer_config(root / "trainer-torch.yaml"), TorchTrainerConfig)
    assert isinstance(load_trainer_config(root / "trainer-tinker.yaml"), TinkerTrainerConfig)
    assert _fields_without_description(TorchTrainerConfig) == []
    assert _fields_without_description(TinkerTrainerConfig) == []


def test_unknown_and_missing_keys_are_rejected_with_their_path(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump({"model": {"path": "m"}, "loss": {"w_opdd": 0.5}}))
    with pytest.raises(
        ConfigError, match=r"bad.yaml: invalid TorchTrainerConfig:\n  loss.w_opdd: unknown key"
    ):
        load_trainer_config(path)
    with pytest.raises(ConfigError, match="model: required key is missing"):
        parse_trainer_config({"num_steps": 3})
    with pytest.raises(ConfigError, match="trainer: must be 'torch' or 'tinker'"):
        parse_trainer_config({"trainer": "jax"})
    with pytest.raises(ConfigError, match="vllm_lora' needs model.lora.enabled"):
        parse_trainer_config({"model": {"path": "m"}, "weight_sync": {"mode": "vllm_lora"}})


def test_cli_reports_config_errors_with_exit_code_2(tmp_path, capsys):
    path = tmp_path / "bad.yaml"
    path.write_text("model: {path: m}\noptim: {lr: -1}\n")
    assert train_main(["--config", str(path)]) == 2
    assert "optim.lr: Input should be greater than 0" in capsys.readouterr().err
    assert train_main(["--config", str(tmp_path / "missing.yaml")]) == 2
