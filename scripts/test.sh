#!/usr/bin/env bash
# The test command (README, CI): set up .venv (or use the GPU machine's python), build, run every test.
# Extra arguments go to pytest, e.g. `bash scripts/test.sh -k planner`;
# --rebuild (first) rebuilds the extension even when nothing looks changed.
set -uo pipefail
REBUILD=0
if [ "${1:-}" = --rebuild ]; then REBUILD=1; shift; fi
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh" || { echo "[test] setup failed"; exit 1; }
# -P: the checkout is not put on sys.path, so only the installed names (tiles_ext.planner, ...) import.
exec "$PY" -P -m pytest tests -q -rs --durations=15 "$@"
