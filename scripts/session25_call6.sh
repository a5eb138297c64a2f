#!/bin/bash
# Session 25, call 6 (result: TILES_ATTN_TC=2 +1.2% at 32, -2.2% at 16000, SmolLM2 +0.5/+1.3% on main's own FFMA
# path at 32: the prompt-32 cost is the kernel's code generation; TILES_ATTN_TC=2 was removed after this call).
# Question: is v63d's +0.8% at prompt 32 the tensor-core path's execution or the whole kernel's codegen?
# TILES_ATTN_TC=2 runs the tensor cores only in tiles of more than one chunk (short tiles keep main's FFMA path, both
# compiled; the default variant spills 12 bytes, the flag variant, which SmolLM2 runs, none). Swap against main at
# Llama-1B 32 / 16000 and SmolLM2 32, then the long-context kernel tests on the knob build.
cd "$(dirname "$0")/.." || exit 1
exec > >(tee "${OUT:-/tmp}/call6.log") 2>&1
source scripts/ab_common.sh
build_pair tc2 TILES_ATTN_TC=2
swap_ab "llama-3.2-1b:32,16000;smollm2-135m:32" base tc2
echo "swap done t=$(( $(date +%s) - AB_T0 ))"
timeout 60 python3 -m pytest -q -s tests/test_cuda_kernel.py -k "long_context or cuda_matches_cpu" 2>&1 \
  | grep -E "cuda-vs-cpu|passed|failed|Error|assert" | tail -12 | sed "s/^/tc2 /"
echo "total t=$(( $(date +%s) - AB_T0 ))"
