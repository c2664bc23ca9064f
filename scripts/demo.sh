#!/usr/bin/env bash
# The README's main-job command: set up, then `hermes-opd demo`: OPD groups collected with the
# shipped copying student on the convention tasks, the real closed loop (vLLM with LoRA hot-loading,
# run-api, the env, hermes-opd train) for a few OPD steps, held-out success before and after
# (docs/recipes/conventions-demo.md). Arguments go to `hermes-opd demo`, e.g.
#   bash scripts/demo.sh --dev-model     # the pipeline's data alone, on the 1.3M dev model (no training)
#   bash scripts/demo.sh --out runs/demo2 --seed 1
set -euo pipefail
cd "$(dirname "$0")/.."
started=$SECONDS
bash scripts/setup.sh
echo "==> setup: $((SECONDS - started)) s"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
exec "${HERMES_OPD_VENV:-.venv}/bin/hermes-opd" demo --out runs/demo "$@"
