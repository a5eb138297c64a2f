#!/bin/bash
# Prepared in session 17 (perf log, "Next (issue 8), after session 17", item 3), NOT run: where the critical ATTN
# tile's 1.35 us "inputs" phase goes at Llama-1B ctx 32. Three timing builds (TILES_ATTN_SPLIT, decode_kernel.cu):
# 0 = up to the first chunk's K/V rows landed (as always), 1 = up to the barrier after q and the new row,
# 2 = up to thread 0's q elements arriving. ~3 min with the machine's start; no carry.
cd "$(dirname "$0")/.." || exit 1
source scripts/ab_common.sh
build tree  # tile_timing imports tiles_ext (the model helpers)
for d in 0 1 2; do
  TILES_TIMING_BUILD=/tmp/tt_split$d TILES_TIMING_DEFINES="-DTILES_ATTN_SPLIT=$d" timeout 120 python3 \
    scripts/tile_timing.py --model llama-3.2-1b --ctx 32 --steps 8 --opts 25183 2>&1 | grep -v Warning \
    | grep -E "us/token|^(QKV|ATTN|MERGE|O) |  ATTN " | sed "s/^/split$d /"
done
echo "total t=$(( $(date +%s) - AB_T0 ))"
