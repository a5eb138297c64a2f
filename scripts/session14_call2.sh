#!/usr/bin/env bash
# Session 14, call 2: which work overlaps the K/V stream (kv_probe work kinds), and where an ATTN tile's chunk time
# goes in the real kernel (timing build with -DTILES_ATTN_PROFILE: clock64 cycles per step of the chunk loop).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/ab_common.sh
T0=$(date +%s)
(build main > /tmp/build.txt 2>&1) &
BUILD=$!
nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a scripts/kv_probe.cu -o /tmp/kv_probe && /tmp/kv_probe | tee $OUT/kv_probe2.txt
echo "=== probe t=$(( $(date +%s) - T0 ))"
wait $BUILD; cat /tmp/build.txt
for ctx in 16384 4096 160; do
  TILES_TIMING_DEFINES="-DTILES_ATTN_PROFILE" timeout 120 python3 scripts/tile_timing.py --model llama-3.2-1b --ctx $ctx \
    --steps 2 --opts 25183 > $OUT/prof-$ctx.txt 2>&1
  grep ATTNPROF $OUT/prof-$ctx.txt | head -12
  grep -A3 "us/token" $OUT/prof-$ctx.txt | head -4; grep "ATTN " $OUT/prof-$ctx.txt | head -3
  tail -3 $OUT/prof-$ctx.txt | grep -i "error\|Traceback" || true
done
echo "=== done t=$(( $(date +%s) - T0 ))"
