#!/bin/bash
# Session 23, call 3 (perf log, session 23; v58 rejected, level: the knob was removed, the profile marks kept). v58
# (build knob TILES_ATTN_ONEBAR=1): the attention warp path's chunk loop with one block barrier per chunk instead of
# two (each warp computes as soon as its own copies of the next chunk are issued). Bits against the base build
# (positions 40, 505, 3000, 16000), the kernel tests on the knob build, the two builds' .so in turn; then, if time
# is left, main's ATTN profile with the warp path's sub-steps at 16000 and 32.
cd "$(dirname "$0")/.." || exit 1
exec > >(tee "${OUT:-/tmp}/call3.log") 2>&1
source scripts/ab_common.sh
knob_ab ob TILES_ATTN_ONEBAR=1 "40 505 3000 16000" "llama-3.2-1b:32,4064,16000;smollm2-135m:32,4064"
if [ $(( $(date +%s) - AB_T0 )) -lt 430 ]; then attn_prof m16kp 16000 "-DTILES_ATTN_PROFILE"; fi
if [ $(( $(date +%s) - AB_T0 )) -lt 520 ]; then attn_prof m32p 32 "-DTILES_ATTN_PROFILE"; fi
echo "total t=$(( $(date +%s) - AB_T0 ))"
