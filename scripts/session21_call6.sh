#!/bin/bash
# Session 21, call 6 (perf log, session 21, Next items 2-3): tile_timing.py's stage and busy tables for SmolLM2's
# flag kernel at ctx 32 on three plans that differ in attention placement (v51's 24 partitions off the qkv workers,
# 20 off them: +3.2% in call 4, v50's 16 by the byte balance), then Llama-1B at ctx 4064 (its long-context attention).
cd "$(dirname "$0")/.." || exit 1
exec > >(tee "${OUT:-/tmp}/call6.log") 2>&1
source scripts/ab_common.sh
build tree
tt() {  # tt TAG MODEL CTX HANDOFF PLAN
  echo "=== $1: $2 ctx $3 $4 plan '$5'"
  TILES_TIMING_BUILD=/tmp/tt timeout 120 python3 scripts/tile_timing.py --model "$2" --ctx "$3" --steps 8 \
    --opts 25183 --handoff "$4" --plan "$5" --json "${OUT:-/tmp}/tt-$1.json" 2>&1 \
    | grep -v Warning | sed -n '/us\/token/,$p' | grep -v "^$"
}
tt s24 smollm2-135m 32 flags ""
tt s20 smollm2-135m 32 flags "attn_partitions=20@attn_off_qkv=1"
tt s16 smollm2-135m 32 flags "attn_off_qkv=0"
tt l4064 llama-3.2-1b 4064 counters ""
echo "total t=$(( $(date +%s) - AB_T0 ))"
