#!/bin/bash
# Session 22, call 3 (perf log, session 22). Measurements for the next session, no change measured: tile_timing of
# Llama-1B at ctx 32 on main (v54's LM-head epilogue), then at ctx 4064 and 16000 with TILES_ATTN_PROFILE (an ATTN
# tile's cycles per step of its chunk loop: issue, wait, the warp path's chunk, combine), since v53 found the chunk
# loop's time unchanged with every K/V row landed before it.
cd "$(dirname "$0")/.." || exit 1
exec > >(tee "${OUT:-/tmp}/call3.log") 2>&1
source scripts/ab_common.sh
build tree
tt() {  # tt TAG CTX DEFINES
  echo "=== $1: llama-3.2-1b ctx $2 defines '$3'"
  TILES_TIMING_DEFINES="$3" TILES_TIMING_BUILD=/tmp/tt timeout 150 python3 scripts/tile_timing.py \
    --model llama-3.2-1b --ctx "$2" --steps 8 --opts 25183 --json "${OUT:-/tmp}/tt-$1.json" > "/tmp/tt-$1.out" 2>&1
  grep "ATTNPROF" "/tmp/tt-$1.out" | tail -8
  grep -v "Warning\|ATTNPROF" "/tmp/tt-$1.out" | sed -n '/us\/token/,$p' | grep -v "^$"
  cp "/tmp/tt-$1.out" "${OUT:-/tmp}/"
}
tt l32 32 ""
tt l4064p 4064 "-DTILES_ATTN_PROFILE"
tt l16kp 16000 "-DTILES_ATTN_PROFILE"
echo "total t=$(( $(date +%s) - AB_T0 ))"
