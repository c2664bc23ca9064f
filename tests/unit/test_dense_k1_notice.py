"""The once-per-run warning for equal-score `dense_k1` groups, which stock tinker-atropos drops."""

from __future__ import annotations

import asyncio
import io
import logging
from collections import deque
from types import SimpleNamespace

from environments.delivery.tinker_drops import TRAIN_COMMAND, DenseK1Notice, equal_score_teacher_positions
from hermes_opd.contract.provenance import scored_positions
from tests.support.groups import build_group, to_dense_group


def equal_dense_group(seed: int = 0) -> dict:
    group = to_dense_group(build_group(seed=seed))
    group["scores"] = [0.0] * len(group["scores"])
    return group


def test_counts_the_teacher_positions_of_equal_score_dense_groups_only():
    group = equal_dense_group()
    expected = sum(int(scored_positions(group, seq).sum()) for seq in range(3))
    assert expected > 0
    assert equal_score_teacher_positions(group) == expected
    assert equal_score_teacher_positions(to_dense_group(build_group())) == 0  # scores differ: not dropped
    topk = build_group()
    topk["scores"] = [0.0] * 3
    assert equal_score_teacher_positions(topk) == 0  # topk is not for tinker-atropos
    unscored = to_dense_group(build_group(group_size=2, statuses=("no_hint", "no_hint", "no_next_state")))
    unscored["scores"] = [1.0] * 2
    assert equal_score_teacher_positions(unscored) == 0  # nothing to lose


def test_warns_once_per_run_with_the_count_and_the_command():
    emitted: list[str] = []
    notice = DenseK1Notice(emitted.append)
    assert notice.check(to_dense_group(build_group())) is None
    group = equal_dense_group()
    message = notice.check(group)
    assert message is not None and emitted == [message]
    positions = equal_score_teacher_positions(group)
    assert f"carries {positions} teacher positions" in message
    assert "Stock tinker-atropos skips equal-score groups before it reads distill data" in message
    assert f"`{TRAIN_COMMAND}`" in message
    assert notice.check(equal_dense_group(seed=1)) is None and len(emitted) == 1
    fresh = DenseK1Notice(emitted.append)
    assert fresh.check({"scores": [[1]], "tokens": 3}) is None and fresh.check(None) is None  # never raises


def test_process_job_warns_once_and_records_it(tmp_path):
    from environments.delivery.groups_file import GroupWriter
    from hermes_opd.commands.process import JobResult, StopController, _collect_loop
    from hermes_opd.commands.progress import Progress

    groups = [equal_dense_group(0), equal_dense_group(1), to_dense_group(build_group(2))]

    class Env:
        config = SimpleNamespace(group_size=3, use_wandb=False)

        def seek(self, index):
            self.index = index

        async def get_next_item(self):
            return SimpleNamespace(task_id=f"task-{self.index}", index=self.index)

        async def collect_trajectories(self, task):
            return groups[task.index], []

    stream = io.StringIO()
    progress = Progress(3, 0, stream=stream, mode="lines")
    writer = GroupWriter(tmp_path / "groups.jsonl")
    result = JobResult(out=tmp_path / "groups.jsonl", metrics_path=tmp_path / "m.jsonl", target=3)
    asyncio.run(
        _collect_loop(
            Env(),
            SimpleNamespace(),
            writer,
            progress,
            StopController(progress),
            deque([0, 1, 2]),
            result,
            concurrency=1,
            max_attempts=1,
            max_consecutive_failures=3,
        )
    )
    writer.close()
    assert result.written == 3
    assert len(result.warnings) == 1 and TRAIN_COMMAND in result.warnings[0]
    assert f"carries {equal_score_teacher_positions(groups[0])} teacher positions" in result.warnings[0]
    assert stream.getvalue().count("Stock tinker-atropos skips equal-score groups") == 1


def test_env_serve_path_warns_once(dev_model_dir, monkeypatch, caplog):
    from atroposlib.envs.base import BaseEnv

    from environments.atropos.agentic_opd_env import AgenticOPDEnv

    sent = []

    async def parent_send(self, scored_data, item=None, do_send_to_api=True, abort=True):
        sent.append(scored_data)

    monkeypatch.setattr(BaseEnv, "handle_send_to_api", parent_send)
    config, servers = AgenticOPDEnv.config_init()
    config.tokenizer_name = str(dev_model_dir)
    config.use_wandb = False
    config.distill_mode = "dense_k1"
    servers[0].tokenizer_name = str(dev_model_dir)
    env = AgenticOPDEnv(config, servers)
    with caplog.at_level(logging.WARNING):
        for seed in range(3):
            asyncio.run(env.handle_send_to_api(equal_dense_group(seed)))
    warnings = [r.getMessage() for r in caplog.records if "Stock tinker-atropos skips" in r.getMessage()]
    assert len(warnings) == 1 and TRAIN_COMMAND in warnings[0]
    assert len(sent) == 3  # the groups are still sent: our trainers train them
