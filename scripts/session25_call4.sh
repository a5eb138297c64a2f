#!/bin/bash
# Session 25, call 4 (perf log v63d, the knob's code on main; result: -4.2% at 16000, -0.2% at 4064, +0.8% at 32,
# +0.5% SmolLM2: kept as the build knob TILES_ATTN_TC=1, off by default).
# v63c (call 3: -3.0% at 16000, +1.0% at 32) with the hi and lo halves of q and P
# as A's rows r and r + 8 of one MMA (4 + 8 HMMA per warp and chunk instead of 8 + 16, and no zero A registers: 44
# fewer instructions per chunk). Kernel tests on the knob build, the same-process swap against main, then the ATTN
# profile of the knob at 16000.
cd "$(dirname "$0")/.." || exit 1
exec > >(tee "${OUT:-/tmp}/call4.log") 2>&1
source scripts/ab_common.sh
knob_acc tc TILES_ATTN_TC=1 "llama-3.2-1b:32,4064,16000;smollm2-135m:32"
attn_prof tcd16k 16000 "-DTILES_ATTN_PROFILE -DTILES_ATTN_TC=1"
echo "total t=$(( $(date +%s) - AB_T0 ))"
