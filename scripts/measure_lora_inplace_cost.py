"""Does a LoRA adapter loaded with `load_inplace` cost a reload per request on this vLLM?

vLLM 0.32 keeps the `load_inplace` flag on the stored adapter request and passes it to the engine
with every request that names the adapter; `add_adapter` in vllm/lora/worker_manager.py then loads
it from disk again. This starts a CPU vLLM with LoRA hot-loading (by its own PID, stopped at the
end), loads one random-B peft adapter twice, under `inplace` (load_inplace true) and under
`fresh-step1` (a new name, as trainer_adapters/weight_sync.py's per_step naming does), and times
40 alternating 16-token requests against each and against the base model.

    .venv/bin/python scripts/measure_lora_inplace_cost.py [MODEL_DIR] [WORK_DIR]
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from pathlib import Path

import httpx
import torch


def main(model_dir: str, work: Path) -> dict[str, dict[str, float]]:
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from hermes_opd.devkit.dev_server import DevServer

    os.environ["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] = "1"
    work.mkdir(parents=True, exist_ok=True)
    peft_model = get_peft_model(
        AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32),
        LoraConfig(r=8, lora_alpha=16, target_modules="all-linear", lora_dropout=0.0),
    )
    with torch.no_grad():
        for name, param in peft_model.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.02)  # a non-trivial adapter
    adapter = str(work / "adapter")
    peft_model.save_pretrained(adapter)
    server = DevServer(
        model_dir,
        enable_scale_out=False,
        log_path=str(work / "vllm.log"),
        extra_args=["--enable-lora", "--max-lora-rank", "8", "--max-loras", "3"],
    )
    server.start()
    try:
        with httpx.Client(timeout=120) as http:

            def post(path: str, body: dict) -> None:
                response = http.post(server.root_url + path, json=body)
                if response.status_code != 200:
                    raise RuntimeError(f"{path}: {response.status_code} {response.text[:300]}")

            post("/v1/load_lora_adapter", {"lora_name": "inplace", "lora_path": adapter})
            post(
                "/v1/load_lora_adapter", {"lora_name": "inplace", "lora_path": adapter, "load_inplace": True}
            )
            post("/v1/load_lora_adapter", {"lora_name": "fresh-step1", "lora_path": adapter})
            prompt = list(range(5, 105))
            times: dict[str, list[float]] = {"inplace": [], "fresh-step1": [], server.model_name: []}
            for i in range(43):
                for name in times:
                    started = time.perf_counter()
                    post(
                        "/v1/completions",
                        {
                            "model": name,
                            "prompt": prompt,
                            "max_tokens": 16,
                            "temperature": 1.0,
                            "seed": i,
                            "ignore_eos": True,
                        },
                    )
                    if i >= 3:  # the first three rounds warm up
                        times[name].append(time.perf_counter() - started)
    finally:
        server.stop()
    return {
        name: {"median_s": statistics.median(v), "mean_s": statistics.fmean(v)} for name, v in times.items()
    }


if __name__ == "__main__":
    from environments.atropos.embedded_paths import default_dev_model_dir

    model = sys.argv[1] if len(sys.argv) > 1 else str(default_dev_model_dir())
    print(json.dumps(main(model, Path(sys.argv[2] if len(sys.argv) > 2 else "runs/lora-inplace-cost"))))
