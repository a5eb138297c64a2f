#!/bin/bash
# Session 27, call 4 (result: Llama-1B 17.3 us per layer above its bytes at ctx 32, as in session 22; perf log).
# tile_timing's stage table of the new default (v65 + v66) at ctx 32 for Llama-1B and SmolLM2 (the short-context
# figures the targets name: where each stage's span exceeds its bytes).
cd "$(dirname "$0")/.." || exit 1
exec > >(tee "${OUT:-/tmp}/call4.log") 2>&1
source scripts/ab_common.sh
build tree
for m in llama-3.2-1b smollm2-135m; do
  echo "=== $m ctx 32"
  TILES_TIMING_BUILD=/tmp/tt timeout 120 python3 scripts/tile_timing.py --model "$m" --ctx 32 --steps 8 \
    --opts 25183 --json "${OUT:-/tmp}/tt-$m-32.json" > "/tmp/tt-$m.out" 2>&1
  grep -v "Warning" "/tmp/tt-$m.out" | sed -n '/us\/token/,$p' | grep -v "^$" | head -60
  cp "/tmp/tt-$m.out" "${OUT:-/tmp}/"
done
echo "total t=$(( $(date +%s) - AB_T0 ))"
