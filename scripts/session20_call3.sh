#!/bin/bash
# Session 20, call 3 (perf log, session 20): the matvec floor's size on SmolLM2 (planner.graph MIN_ROWS = 16, the
# default since this session) against 0 (one piece per worker), 12, 24 and 32 rows, on its flag kernel; and the
# same plans on counters (is flags still the better hand-off with fewer, larger tiles?). Same-process A/B.
cd "$(dirname "$0")/.." || exit 1
exec > >(tee "${OUT:-/tmp}/call3.log") 2>&1
source scripts/ab_common.sh
build tree
timeout 150 python3 scripts/wait_bound.py --rounds 3 --handoff auto \
  --variants "min_rows=0;min_rows=12;min_rows=24;min_rows=32" \
  --models "smollm2-135m:32,4064" 2>&1 | grep -v Warning | grep "BOUND\|rror"
mv "${OUT:-/tmp}/wait_bound.json" "${OUT:-/tmp}/wait_bound-flags.json" 2>/dev/null
timeout 100 python3 scripts/wait_bound.py --rounds 3 --handoff counters --variants "min_rows=0;min_rows=24" \
  --models "smollm2-135m:32,4064" 2>&1 | grep -v Warning | grep "BOUND\|rror"
echo "total t=$(( $(date +%s) - AB_T0 ))"
