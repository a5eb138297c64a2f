#!/bin/bash
# Session 21, call 3 (perf log, session 21). SmolLM2 (flag kernel): call 2 found attn_off_qkv -5.2% at ctx 4064 and
# +1.5% at 32, with or without o_off_attn. Does a partition count serve both? Same-process A/B via wait_bound.
cd "$(dirname "$0")/.." || exit 1
exec > >(tee "${OUT:-/tmp}/call3.log") 2>&1
source scripts/ab_common.sh
build tree
timeout 300 python3 scripts/wait_bound.py --rounds 3 --handoff auto --max-cache 16512 \
  --variants "attn_off_qkv=1;attn_partitions=8;attn_partitions=8@attn_off_qkv=1;attn_partitions=12@attn_off_qkv=1;attn_partitions=24@attn_off_qkv=1" \
  --models "smollm2-135m:32,4064,16000" 2>&1 | grep -v Warning | grep "BOUND\|rror"
echo "total t=$(( $(date +%s) - AB_T0 ))"
