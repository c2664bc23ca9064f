#!/usr/bin/env bash
# Create or reuse .venv-tinker: a Python 3.12 venv holding a local Tinker-API server (skyrl 0.4.0's
# "tx" server on its CPU JAX backend) and the tinker SDK the server pins, for the `tinker` test suite
# (docs/trainers.md, "A local Tinker-API server"). Idempotent: a second run with an unchanged
# script does nothing.
#   HERMES_OPD_TINKER_VENV   venv location (default: .venv-tinker in the repo)
#   PYTHON312                a Python 3.12 interpreter (default: python3.12, else pyenv's 3.12)
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${HERMES_OPD_TINKER_VENV:-.venv-tinker}"
# skyrl pins tinker==0.25.0 and transformers==5.16.1; aiohttp is missing from its dependencies
# (the server's API module imports it); the API process starts its engine with `uv run`.
REQS=("skyrl[tinker,jax]==0.4.0" "aiohttp" "uv")

find_python312() {
  if [ -n "${PYTHON312:-}" ]; then echo "$PYTHON312"; return; fi
  local cand
  for cand in python3.12 "$(command -v pyenv >/dev/null && pyenv root)/versions/"3.12*/bin/python3.12; do
    if [ -n "$cand" ] && "$cand" -c 'import sys; assert sys.version_info[:2] == (3, 12)' 2>/dev/null; then
      echo "$cand"; return
    fi
  done
  echo "[tinker-setup] no Python 3.12 found (set PYTHON312)" >&2
  exit 2
}

STAMP="$VENV/.hermes-opd-tinker-installed"
WANT="$(cat scripts/tinker-server-setup.sh pyproject.toml | sha256sum | cut -c1-16)"
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$WANT" ] \
  && "$VENV/bin/python" -c "import skyrl.tinker.engine, tinker, aiohttp, trainer_adapters" 2>/dev/null; then
  echo "[tinker-setup] $VENV is up to date"
  exit 0
fi
start=$(date +%s)
if [ ! -x "$VENV/bin/python" ]; then
  PY="$(find_python312)"
  echo "[tinker-setup] creating $VENV with $PY"
  "$PY" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install -q --upgrade pip
# peft (a hard dependency of skyrl) pulls torch; PyPI has only the CUDA build of torch for
# Python 3.12, so the venv carries it (about 3.2 GB of nvidia wheels) although JAX runs on the CPU.
"$VENV/bin/python" -m pip install -q "${REQS[@]}"
# hermes-opd itself, without its dependencies (atroposlib and vLLM stay in .venv): the trainer side
# of the tinker suite (`hermes-opd train` with trainer: tinker) runs here, on the SDK the server pins.
"$VENV/bin/python" -m pip install -q --no-deps -e .
"$VENV/bin/python" -c "import skyrl.tinker.engine, tinker, jax, aiohttp; print('[tinker-setup] tinker', tinker.__version__, 'jax', jax.__version__, jax.devices())"
echo "$WANT" > "$STAMP"
echo "[tinker-setup] done in $(( $(date +%s) - start ))s, $(du -sh "$VENV" | cut -f1)"
