#!/usr/bin/env bash
# The README's main-job command: set up, then run the embedded CPU demo end to end
# (build the dev model, start a local vLLM, collect OPD groups with real tools, write a report).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
exec "${HERMES_OPD_VENV:-.venv}/bin/hermes-opd" demo --out "${1:-runs/demo}"
