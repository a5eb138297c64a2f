#!/usr/bin/env bash
# Session 14, call 4 (~6 min): v45 as it would ship: TILES_ATTN_WARPS=1 compiles the warp path alone into the default
# variants (launch_decode sends other shapes to the runtime-options kernel) against main's kernel: opt_ab (Llama-1B
# ctx 32 / 4064 / 16000, SmolLM2 ctx 32), the GPU suite on the v45 build, the ATTN profile at 16K, timing at ctx 32.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/ab_common.sh
build base
abx base
build warps TILES_ATTN_WARPS=1
timeout 150 python3 -m pytest -q tests/test_cuda_kernel.py 2>&1 | grep -v "Warning\|warn" | tail -15 | tee $OUT/gputests-warps.txt
abx warps
TILES_TIMING_DEFINES="-DTILES_ATTN_WARPS=1 -DTILES_ATTN_PROFILE" timeout 120 python3 scripts/tile_timing.py \
  --model llama-3.2-1b --ctx 16384 --steps 2 --opts 25183 > $OUT/prof-warps-16384.txt 2>&1
grep ATTNPROF $OUT/prof-warps-16384.txt | head -2
grep -A9 "us/token" $OUT/prof-warps-16384.txt | head -10
TILES_TIMING_DEFINES="-DTILES_ATTN_WARPS=1" timeout 100 python3 scripts/tile_timing.py \
  --model llama-3.2-1b --ctx 32 --steps 8 --opts 25183 > $OUT/tt-warps-32.txt 2>&1
grep -A9 "us/token" $OUT/tt-warps-32.txt | head -10
tail -3 $OUT/tt-warps-32.txt | grep -i "error\|Traceback" || true
echo "=== done t=$(( $(date +%s) - AB_T0 ))"
