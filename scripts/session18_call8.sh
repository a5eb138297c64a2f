#!/bin/bash
# Session 18, call 8: the ATTN input phase's last 0.42 us (call 7: q, the new row and their barrier done at 0.94 us
# after the wait; the prestaged first chunk landed at 1.36). Split 3 ends the phase when thread 0's own prestaged
# copies have landed (its cp.async wait, before the block barrier); split 0 as in call 7. Llama-1B ctx 32; no carry.
cd "$(dirname "$0")/.." || exit 1
source scripts/ab_common.sh
build tree  # tile_timing imports tiles_ext (the model helpers)
for d in 3 0; do
  TILES_TIMING_BUILD=/tmp/tt_split$d TILES_TIMING_DEFINES="-DTILES_ATTN_SPLIT=$d" timeout 100 python3 \
    scripts/tile_timing.py --model llama-3.2-1b --ctx 32 --steps 8 --opts 25183 2>&1 | grep -v Warning \
    | grep -E "us/token|^(QKV|ATTN|MERGE|O) |  ATTN " | sed "s/^/split$d /"
done
echo "total t=$(( $(date +%s) - AB_T0 ))"
