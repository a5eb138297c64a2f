#!/bin/bash
# Session 20, call 6 (perf log, session 20, Next item 2): why SmolLM2 runs 12-17% slower with matvec pieces of 24 rows
# than of 16 (v50's floor), and where one piece per worker loses: tile_timing.py's stage and busy tables for the
# three plans on SmolLM2's flag kernel, ctx 32.
cd "$(dirname "$0")/.." || exit 1
exec > >(tee "${OUT:-/tmp}/call6.log") 2>&1
source scripts/ab_common.sh
build tree
for rows in 16 24 0; do
  echo "=== smollm2-135m ctx 32 flags min_rows $rows"
  TILES_TIMING_BUILD=/tmp/tt timeout 150 python3 scripts/tile_timing.py --model smollm2-135m --ctx 32 --steps 8 \
    --opts 25183 --handoff flags --min-rows $rows --json "${OUT:-/tmp}/tt-smollm2-32-rows$rows.json" 2>&1 \
    | grep -v Warning | sed -n '/us\/token/,$p' | grep -v "^$"
done
echo "total t=$(( $(date +%s) - AB_T0 ))"
