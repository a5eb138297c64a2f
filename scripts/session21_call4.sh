#!/bin/bash
# Session 21, call 4 (perf log, session 21). SmolLM2 (flag kernel): call 3 found 24 partitions per KV head, all off
# the qkv workers, -6.6% at ctx 4064 and -15.4% at 16000 for +0.3% at 32. More partitions, or without the rule?
cd "$(dirname "$0")/.." || exit 1
exec > >(tee "${OUT:-/tmp}/call4.log") 2>&1
source scripts/ab_common.sh
build tree
timeout 300 python3 scripts/wait_bound.py --rounds 3 --handoff auto --max-cache 16512 \
  --variants "attn_partitions=24@attn_off_qkv=1;attn_partitions=24;attn_partitions=20@attn_off_qkv=1;attn_partitions=32;attn_partitions=44" \
  --models "smollm2-135m:32,4064,16000" 2>&1 | grep -v Warning | grep "BOUND\|rror"
echo "total t=$(( $(date +%s) - AB_T0 ))"
