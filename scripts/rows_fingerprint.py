"""Fingerprint of the rows a fixed run writes, to check that a refactor leaves them bit-identical.

The bench's synthetic group (4 rollouts x 3 turns, dev tokenizer) goes through the OPD pipeline, built
as the bench builds it (`build_backend`: the one constructor, environments/pipeline/build.py), with the
fake judge and the remote-like fake teacher of `hermes_opd.devkit.fake_endpoints`, then through the
group builder, in `topk` and `dense_k1` mode, with and without OPD rows. Prints the sha256 of each
group's JSON (the judge's `votes.latency_s`, a wall-clock timing, removed) and of all of them.

    .venv/bin/python scripts/rows_fingerprint.py            # this checkout
    # an older commit (e.g. ca95989), with that commit's own copy of this script and this venv:
    mkdir /tmp/base && git archive ca95989 | tar -x -C /tmp/base
    (cd /tmp/base && PYTHONPATH=/tmp/base HERMES_OPD_CACHE=$OLDPWD/.cache \
        $OLDPWD/.venv/bin/python scripts/rows_fingerprint.py)
"""

import asyncio
import hashlib
import json
import sys
from pathlib import Path

from transformers import AutoTokenizer

from environments.atropos.embedded_paths import default_dev_model_dir
from environments.delivery.group_builder import FinishedRollout, build_group
from hermes_opd.bench.pipeline_bench import PipelineBenchConfig, build_backend
from hermes_opd.bench.synth import SynthSpec, synth_group
from hermes_opd.devkit.fake_endpoints import FakeEndpoints, FakeSettings


async def main() -> None:
    model_dir = str(default_dev_model_dir())
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    spec = SynthSpec(rollouts=4, turns=3, prompt_tokens=64, turn_tokens=24, state_tokens=32)
    trajectories = synth_group(tokenizer, spec)
    cfg = PipelineBenchConfig(
        tokenizer_dir=model_dir, spec=spec, k=20, judge_latency_s=0.0, teacher_latency_s=0.0
    )
    settings = FakeSettings(
        judge_latency_s=0.0, teacher_latency_s=0.0, vocab_size=len(tokenizer), tokenizer_dir=model_dir
    )
    digests = {}
    with FakeEndpoints(settings) as fake:
        for mode in ("topk", "dense_k1"):
            b = await build_backend(
                cfg, tokenizer, fake.base_url, fake.base_url, "fake-teacher", "completions", distill_mode=mode
            )
            opd = b.opd_config
            distills = [await b.pipeline.process(t) for t in trajectories]
            await b.aclose()
            for with_opd in (True, False):
                rollouts = [
                    FinishedRollout(t, float(i % 2), d if with_opd else None, {"stop_reason": "final_answer"})
                    for i, (t, d) in enumerate(zip(trajectories, distills, strict=True))
                ]
                group = build_group(
                    rollouts, include_messages=True, opd=opd, generation_params={"temperature": 1.0}
                )
                for override in group["overrides"]:  # wall-clock timings are the only non-deterministic field
                    for turn in override["opd"]["turns"]:
                        (turn.get("votes") or {}).pop("latency_s", None)
                text = json.dumps(group, sort_keys=False)
                if len(sys.argv) > 1:  # a path prefix: also write each group's JSON
                    Path(f"{sys.argv[1]}-{mode}-{with_opd}.json").write_text(text)
                digests[f"{mode}/{'opd' if with_opd else 'no-opd'}"] = hashlib.sha256(
                    text.encode()
                ).hexdigest()
                scored = sum(
                    1 for o in group["overrides"] for t in o["opd"]["turns"] if t["status"] == "scored"
                )
                digests[f"{mode}/{'opd' if with_opd else 'no-opd'}/scored_turns"] = scored
    for k, v in digests.items():
        print(k, v)
    print("all", hashlib.sha256(json.dumps(digests).encode()).hexdigest())


if __name__ == "__main__":
    asyncio.run(main())
