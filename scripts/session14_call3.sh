#!/usr/bin/env bash
# Session 14, call 3 (~7 min): v45, TILES_ATTN_WARPS=1 (each warp owns 8 positions of every attention chunk; two
# block barriers per chunk instead of five) against main's kernel: opt_ab (Llama-1B ctx 32 / 4064 / 16000, SmolLM2
# ctx 32), the GPU suite on the v45 build, and the ATTN chunk profile at 16K (timing build, TILES_ATTN_PROFILE).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/ab_common.sh
build base
abx base
build warps TILES_ATTN_WARPS=1
timeout 150 python3 -m pytest -q -x tests/test_cuda_kernel.py 2>&1 | tail -4 | tee $OUT/gputests-warps.txt
abx warps
TILES_TIMING_DEFINES="-DTILES_ATTN_WARPS=1 -DTILES_ATTN_PROFILE" timeout 120 python3 scripts/tile_timing.py \
  --model llama-3.2-1b --ctx 16384 --steps 2 --opts 25183 > $OUT/prof-warps-16384.txt 2>&1
grep ATTNPROF $OUT/prof-warps-16384.txt | head -4
grep -A3 "us/token" $OUT/prof-warps-16384.txt | head -4; grep "ATTN " $OUT/prof-warps-16384.txt | head -3
tail -3 $OUT/prof-warps-16384.txt | grep -i "error\|Traceback" || true
echo "=== done t=$(( $(date +%s) - AB_T0 ))"
