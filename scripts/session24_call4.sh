#!/bin/bash
# Session 24, call 4 (perf log, session 24; v62 REJECTED, +0.6% at ctx 32: the knob was removed). v62 (build knob
# TILES_ATTN_LANEMAP=1): the warp path's lanes remapped so that lanes n and n^1 share a q row, n and n^2 a K row, and n
# and n^1 a V piece. An LDS.128 returns one register per cycle for the warp (4 wavefronts) unless such lane pairs read
# the same address (2): call 1's ncu counted 4 per q and V read, 2 per K read, 112 per warp and chunk; remapped, 64.
# Each lane computes what a lane of the plain layout did: the same bits. knob_ab (bits at three positions, the kernel
# tests, the two builds' .so in turn), then ncu's source counters on the knob build at 16000 positions (the wavefronts
# per LDS.128).
cd "$(dirname "$0")/.." || exit 1
exec > >(tee "${OUT:-/tmp}/call4.log") 2>&1
source scripts/ab_common.sh
knob_ab lm TILES_ATTN_LANEMAP=1 "40 3000 16000" "llama-3.2-1b:32,4064,16000;smollm2-135m:32"
ncu_src lm 16000
echo "total t=$(( $(date +%s) - AB_T0 ))"
