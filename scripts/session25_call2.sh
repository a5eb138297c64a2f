#!/bin/bash
# Session 25, call 2 (perf log v63b; result: -2.2% at 16000, +1.2% at 32, +1.2% SmolLM2; superseded by v63d).
# v63 (call 1: -1.0% at 16000, +0.8% at 32) with the o slots in a conflict-free
# layout ([warp][n][lane] float2: call 1's [warp][G][hd] took 4 wavefronts per access, ~1K cycles per chunk at 16K)
# and shorter MMA chains (scores in four independent accumulators, P V's hi and lo apart). Kernel tests on the knob
# build, the same-process swap against main, and the ATTN profile of the knob at 16000 and at 32.
cd "$(dirname "$0")/.." || exit 1
exec > >(tee "${OUT:-/tmp}/call2.log") 2>&1
source scripts/ab_common.sh
knob_acc tc TILES_ATTN_TC=1 "llama-3.2-1b:32,4064,16000;smollm2-135m:32"
attn_prof tc16k 16000 "-DTILES_ATTN_PROFILE -DTILES_ATTN_TC=1"
attn_prof tc32 32 "-DTILES_ATTN_PROFILE -DTILES_ATTN_TC=1"
echo "total t=$(( $(date +%s) - AB_T0 ))"
