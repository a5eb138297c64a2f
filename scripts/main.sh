#!/usr/bin/env bash
# The main job (README): set up, then decode with and without Tiles on the embedded SmolLM2-135M-Instruct
# (tiles_ext.demo); on a CUDA machine also run the benchmark (tiles_ext.bench --gpu).
# Extra arguments go to the demo, e.g. `bash scripts/main.sh --prompt "Why is the sky blue?"`;
# --rebuild (first) rebuilds the extension even when nothing looks changed.
set -uo pipefail
REBUILD=0
if [ "${1:-}" = --rebuild ]; then REBUILD=1; shift; fi
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh" || { echo "[main] setup failed"; exit 1; }
status=0
"$PY" -P -m tiles_ext.demo "$@" || { status=$?; echo "[main] demo failed (exit $status)"; }
if [ "$HAS_GPU" = 1 ]; then
    "$PY" -P -m tiles_ext.bench --gpu || { status=$?; echo "[main] benchmark failed (exit $status)"; }
fi
exit $status
