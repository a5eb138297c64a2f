#!/bin/bash
# Session 24, call 3 (perf log, session 24; v61 REJECTED, +0.8 to +1.6%: the knob was removed). v61 (build knob
# TILES_ATTN_QDUP=1): a second copy of the rotated q, 16 banks further on, read by quarter-warps 1 and 2 of the warp
# path's scores. Call 1's ncu counted 4 wavefronts per LDS.128 of q (every quarter-warp reads the same 4 addresses) but
# 2 per K read (quarter-warps on disjoint banks share one); with the copy each pair of quarters touches disjoint banks.
# Same values, same order: the same bits. knob_ab (bits at three positions, the kernel tests, the two builds' .so in
# turn), then ncu's source counters on the knob build at 16000 positions: do its q reads take 2 wavefronts?
cd "$(dirname "$0")/.." || exit 1
exec > >(tee "${OUT:-/tmp}/call3.log") 2>&1
source scripts/ab_common.sh
knob_ab qd TILES_ATTN_QDUP=1 "40 3000 16000" "llama-3.2-1b:32,4064,16000;smollm2-135m:32"
ncu_src qd 16000
echo "total t=$(( $(date +%s) - AB_T0 ))"
