#!/bin/bash
# Session 19, call 4 (perf log, session 19): planner-only variants, same-process A/B (scripts/wait_bound.py).
# - o_rows=16: the o projection in 128 pieces of 16 rows. Today's cut (124 pieces off the MERGE workers) gives
#   17-row pieces: 9 units (matvec_shape), so ksplit 1, 7 warps idle, half of each row staged, the other half read
#   after the wait (a second DRAM round trip on the critical tile). 16 rows: 8 units, ksplit 2, the tile fully staged.
# - o_off_merge=0: 132 pieces of 15-16 rows (also fully staged), o on the MERGE workers again (v17's question).
# - attn_partitions=1 / 8: what the empty ATTN partitions cost at short context (at 4064 only for the record).
cd "$(dirname "$0")/.." || exit 1
exec > >(tee "${OUT:-/tmp}/call4.log") 2>&1
source scripts/ab_common.sh
build tree
timeout 300 python3 scripts/wait_bound.py --rounds 3 \
  --variants "o_rows=16;o_off_merge=0;attn_partitions=1;attn_partitions=8" \
  --models "llama-3.2-1b:32,4064;smollm2-135m:32" 2>&1 | grep -v Warning | grep "BOUND\|rror\|options"
echo "total t=$(( $(date +%s) - AB_T0 ))"
