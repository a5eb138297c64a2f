#!/bin/bash
# Session 24, call 1 (perf log, session 24): the measurements session 23 prepared. scripts/smem_probe.cu (shared
# memory, shuffle, expf and FFMA cost per warp-instruction), then scripts/ncu_attn.sh (per-line stall reasons of one
# decode launch at 16000 and 32 positions, CSVs into $OUT), then the ATTN profile at ctx 32 (the warp path's names).
cd "$(dirname "$0")/.." || exit 1
exec > >(tee "${OUT:-/tmp}/call1.log") 2>&1
source scripts/ab_common.sh
nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a scripts/smem_probe.cu -o /tmp/smem_probe && /tmp/smem_probe
echo "probe t=$(( $(date +%s) - AB_T0 ))"
bash scripts/ncu_attn.sh
echo "ncu t=$(( $(date +%s) - AB_T0 ))"
if [ $(( $(date +%s) - AB_T0 )) -lt 420 ]; then attn_prof main32 32 "-DTILES_ATTN_PROFILE"; fi
echo "total t=$(( $(date +%s) - AB_T0 ))"
