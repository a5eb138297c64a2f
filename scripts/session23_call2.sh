#!/bin/bash
# Session 23, call 2 (perf log, session 23; v57 rejected, +0.5 to +0.9%: the knob was removed). v57 (build knob
# TILES_STAGE_BORROW=1): in a tile with fewer items than warps (Llama-1B's o pieces: 9 items, qkv: 12-13), the idle
# warps stage the items' second batches before the wait, so fewer bytes load after it. Bits against the base build
# (positions 40, 3000), the kernel tests on the knob build, the two builds' .so in turn, then the knob build's tile
# timing at ctx 32 if time is left (session 22's call 3 has main's).
cd "$(dirname "$0")/.." || exit 1
exec > >(tee "${OUT:-/tmp}/call2.log") 2>&1
source scripts/ab_common.sh
knob_ab sb TILES_STAGE_BORROW=1 "40 3000" "llama-3.2-1b:32,4064;smollm2-135m:32,4064"
if [ $(( $(date +%s) - AB_T0 )) -lt 420 ]; then
  TILES_TIMING_DEFINES="-DTILES_STAGE_BORROW=1" TILES_TIMING_BUILD=/tmp/tt timeout 150 python3 scripts/tile_timing.py \
    --model llama-3.2-1b --ctx 32 --steps 8 --opts 25183 --json "${OUT:-/tmp}/tt-sb32.json" > /tmp/tt-sb32.out 2>&1
  grep -v "Warning" /tmp/tt-sb32.out | sed -n '/us\/token/,$p' | grep -v "^$" | head -60
  cp /tmp/tt-sb32.out "${OUT:-/tmp}/"
fi
echo "total t=$(( $(date +%s) - AB_T0 ))"
