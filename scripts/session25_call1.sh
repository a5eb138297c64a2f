#!/bin/bash
# Session 25, call 1 (perf log v63; result: -1.0% at 16000, +0.8/+1.0% at 32, +1.3% SmolLM2; superseded by v63d).
# The attention warp path's scores and o update on the tensor cores (build knob
# TILES_ATTN_TC=1): ldmatrix of K and V, mma m16n8k16 for q K^T and m16n8k8 for P V, q and P as hi + lo bf16 halves,
# o kept in the warp's opart slot. Not bit-identical to main: accuracy against the CPU reference from the kernel tests
# (-s prints cuda-vs-cpu) of both builds, then the same-process swap, then the ATTN profile of the knob at 16000.
cd "$(dirname "$0")/.." || exit 1
exec > >(tee "${OUT:-/tmp}/call1.log") 2>&1
source scripts/ab_common.sh
build base
keep_so base
timeout 150 python3 -m pytest -q -s tests/test_cuda_kernel.py -k "cpu_executor or full_size_parity" 2>&1 \
  | grep -E "cuda-vs-cpu|smollm2-135m:|llama-3.2-1b:|passed|failed" | sed "s/^/base /"
build tc TILES_ATTN_TC=1
keep_so tc
timeout 220 python3 -m pytest -q -s tests/test_cuda_kernel.py 2>&1 \
  | grep -E "cuda-vs-cpu|smollm2-135m:|llama-3.2-1b:|passed|failed|Error|assert" | tail -30 | sed "s/^/tc /"
swap_ab "llama-3.2-1b:32,4064,16000;smollm2-135m:32" base tc
echo "swap done t=$(( $(date +%s) - AB_T0 ))"
attn_prof tc16k 16000 "-DTILES_ATTN_PROFILE -DTILES_ATTN_TC=1"
echo "total t=$(( $(date +%s) - AB_T0 ))"
