#!/usr/bin/env bash
# One device call (~5 min), run from the repository root on the GPU machine: the counter build (the default, bits
# saved, opt_ab), then the flag build (TILES_FLAGS=1: bits compared, the GPU suite, opt_ab). Perf log v28, session 9.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/ab_common.sh
build counters
timeout 60 python3 scripts/lean_check.py save /tmp/ref.pt 2>&1 | tail -1
ab counters
build flags TILES_FLAGS=1
timeout 90 python3 scripts/lean_check.py compare /tmp/ref.pt 2>&1 | tail -2
timeout 200 python3 -P -m pytest tests -q -rfs -k "cuda or gpu" -p no:cacheprovider 2>&1 \
  | grep -E "^(FAILED|ERROR)|passed|failed" | cut -c1-300 | tee ${OUT:-/tmp}/gputests-flags.log
ab flags
echo "=== done t=$(( $(date +%s) - AB_T0 ))"
