#!/bin/bash
# Session 24, call 2 (perf log, session 24; v60 REJECTED, +0.4 to +1.4%: the knob was removed). Call 1's ncu counted 4
# shared-memory wavefronts per LDS.128 of the warp path's q and V reads and 2 per K read, and smem_probe priced an
# LDS.128 at ~7.5 SM cycles against 2.0 for an LDS.64 of 256 contiguous bytes. v60 (build knob TILES_ATTN_LDS64=1): the
# warp path reads q, K and V as 8-byte halves; the same arithmetic in the same order, so the same bits. The probe's new
# LDS.64 rows (the kernel's three patterns) first, then knob_ab: bits at three positions, the kernel tests, the two
# builds' .so in turn.
cd "$(dirname "$0")/.." || exit 1
exec > >(tee "${OUT:-/tmp}/call2.log") 2>&1
source scripts/ab_common.sh
nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a scripts/smem_probe.cu -o /tmp/smem_probe && /tmp/smem_probe
knob_ab l64 TILES_ATTN_LDS64=1 "40 3000 16000" "llama-3.2-1b:32,4064,16000;smollm2-135m:32"
echo "total t=$(( $(date +%s) - AB_T0 ))"
