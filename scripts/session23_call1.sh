#!/bin/bash
# Session 23, call 1 (perf log, session 23; v56 rejected, slower everywhere: the knob was removed). v56 (build knob
# TILES_ATTN_BULK=1): an ATTN tile's K/V chunks arrive by two 1-D bulk copies from one thread (an mbarrier per chunk
# buffer, unpadded K rows) instead of 2048 cp.async from all 512 threads (session 22's profile: ~1.1K cycles of issue
# per 128-position chunk). Bits against the base build (positions 40, 505: a partition holding only the new row,
# 3000 and 16000), the kernel tests on the knob build, the two builds' .so in turn, then the knob build's ATTN
# profile at 16000 if time is left (it was not).
cd "$(dirname "$0")/.." || exit 1
exec > >(tee "${OUT:-/tmp}/call1.log") 2>&1
source scripts/ab_common.sh
knob_ab bulk TILES_ATTN_BULK=1 "40 505 3000 16000" "llama-3.2-1b:32,4064,16000;smollm2-135m:32,4064"
if [ $(( $(date +%s) - AB_T0 )) -lt 380 ]; then attn_prof b16kp 16000 "-DTILES_ATTN_PROFILE -DTILES_ATTN_BULK=1"; fi
echo "total t=$(( $(date +%s) - AB_T0 ))"
