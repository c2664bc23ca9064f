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

# The `tinker` suite (tests/integration/test_tinker_server.py: a local Tinker-API server) runs when its venv is
# there and is skipped otherwise; build it with `bash scripts/tinker-server-setup.sh` (`.ci/run` does; not
# done here: it takes 2-15 min and 6.7 GB; docs/trainers.md, "A local Tinker-API server").
if [ -f "${HERMES_OPD_TINKER_VENV:-.venv-tinker}/.hermes-opd-tinker-installed" ]; then
  echo "[test] the tinker suite runs (${HERMES_OPD_TINKER_VENV:-.venv-tinker} is present)"
else
  echo "[test] the tinker suite is skipped: no ${HERMES_OPD_TINKER_VENV:-.venv-tinker}"
fi

echo "[test] pytest"
"$VENV/bin/python" -m pytest -p no:cacheprovider --durations=40 "$@"
rc=$?
if [ "$rc" = "5" ]; then
  echo "[test] pytest collected no tests: failing" >&2
  exit 1
fi
exit "$rc"
