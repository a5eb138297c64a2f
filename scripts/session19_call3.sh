#!/bin/bash
# Session 19, call 3 (perf log, session 19): where a worker's time goes with and without the dependency waits.
# Call 2 found that the plan with every wait dropped (wait_bound.py '*<*', wrong results) still runs Llama-1B ctx 32
# at 0.713 ms/token, 131 us above its bytes: tile_timing.py's per-class busy table locates that time.
cd "$(dirname "$0")/.." || exit 1
exec > >(tee "${OUT:-/tmp}/call3.log") 2>&1
source scripts/ab_common.sh
build tree
for spec in "llama-3.2-1b 32" "llama-3.2-1b 4064" "smollm2-135m 32"; do
  set -- $spec
  for drop in "" "*<*"; do
    echo "=== $1 ctx $2 drop '$drop'"
    TILES_TIMING_BUILD=/tmp/tt timeout 150 python3 scripts/tile_timing.py --model $1 --ctx $2 --steps 8 \
      --opts 25183 --drop "$drop" --json "${OUT:-/tmp}/tt-$1-$2-${drop:+drop}.json" 2>&1 | grep -v Warning \
      | sed -n '/us\/token/,$p' | grep -v "^$"
  done
done
echo "total t=$(( $(date +%s) - AB_T0 ))"
