#!/bin/bash
# Session 19, call 2 (perf log, session 19): what each dependency boundary costs in the product kernel.
# scripts/wait_bound.py moves one boundary's waits to the previous step (timing only, wrong results) and times the
# plan against the unchanged one, alternating. Then the fused MLP's estimate: the same DOWN<GATEUP bound in a build
# whose GATEUP tiles end with 2048 int64 red.add (TILES_PROBE_MLP_REDUCE), as the fused tile's reduction would.
cd "$(dirname "$0")/.." || exit 1
exec > >(tee "${OUT:-/tmp}/call2.log") 2>&1
source scripts/ab_common.sh
build tree
timeout 240 python3 scripts/wait_bound.py --rounds 2 \
  --variants "DOWN<GATEUP;GATEUP<O;QKV<DOWN;ATTN<QKV;MERGE<ATTN;O<MERGE;*<*" \
  --models "llama-3.2-1b:32,4064;smollm2-135m:32" 2>&1 | grep -v Warning | grep "BOUND\|moved\|rror"
mv "${OUT:-/tmp}/wait_bound.json" "${OUT:-/tmp}/wait_bound-tree.json" 2>/dev/null
build probe TILES_PROBE_MLP_REDUCE=1
timeout 150 python3 scripts/wait_bound.py --rounds 2 --variants "DOWN<GATEUP" \
  --models "llama-3.2-1b:32,4064;smollm2-135m:32" 2>&1 | grep -v Warning | grep "BOUND\|rror" | sed "s/^/reduce /"
mv "${OUT:-/tmp}/wait_bound.json" "${OUT:-/tmp}/wait_bound-reduce.json" 2>/dev/null
echo "total t=$(( $(date +%s) - AB_T0 ))"
