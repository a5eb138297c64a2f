#!/bin/bash
# Session 20, call 8 (perf log, session 20, Next item 2; the two options were removed after it: not adopted):
# SmolLM2's qkv and o pieces sized to one staged batch of the flag kernel's 16 warps (32 rows: one row pair per
# warp; gate/up and down stay at v50's 16, which fill it), against v50's 16 rows everywhere. Same-process A/B on the
# flag kernel (experimental build_plan options qkv_min_rows / o_min_rows).
cd "$(dirname "$0")/.." || exit 1
exec > >(tee "${OUT:-/tmp}/call8.log") 2>&1
source scripts/ab_common.sh
build tree
timeout 150 python3 scripts/wait_bound.py --rounds 3 --handoff auto \
  --variants "qkv_min_rows=32;o_min_rows=32;qkv_min_rows=32@o_min_rows=32;qkv_min_rows=24@o_min_rows=24" \
  --models "smollm2-135m:32,4064" 2>&1 | grep -v Warning | grep "BOUND\|rror"
echo "total t=$(( $(date +%s) - AB_T0 ))"
