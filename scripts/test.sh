#!/usr/bin/env bash
# The README's test command: set up, lint, build the dev model, run every suite (unit, integration
# against a real CPU vLLM started by a session fixture, reliability). Exits non-zero on any failure,
# and also when pytest collected no tests.
set -uo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh || exit 1
VENV="${HERMES_OPD_VENV:-.venv}"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export HERMES_OPD_CACHE="${HERMES_OPD_CACHE:-$PWD/.cache}"

# Headless Chromium renders the inspector report in one test (skipped with a reason if missing).
if [ ! -x /usr/bin/chromium ] && [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null; then
  echo "[test] installing chromium for the inspector browser test"
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
    || echo "[test] chromium could not be installed; the browser test will be skipped"
fi

echo "[test] ruff"
"$VENV/bin/ruff" check . || exit 1
"$VENV/bin/ruff" format --check . || exit 1

echo "[test] dev model"
"$VENV/bin/hermes-opd" dev-model build "$HERMES_OPD_CACHE/dev-model" --if-missing || exit 1

echo "[test] pytest"
"$VENV/bin/python" -m pytest -p no:cacheprovider "$@"
rc=$?
if [ "$rc" = "5" ]; then
  echo "[test] pytest collected no tests: failing" >&2
  exit 1
fi
exit "$rc"
