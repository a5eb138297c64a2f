#!/bin/bash
# Session 21, call 2 (perf log, session 21; the knob and o_off_attn were removed after it: rejected, no gain).
# (1) TILES_COMBINE_UNROLL=1: the ATTN tile's log-sum-exp combine of the warps' states unrolled over kWarps (counter
# kernels; same bits), A/B against the tree's default build, the two .so swapped in turn (Llama-1B ctx 32 / 4064 /
# 16000), then the kernel tests on the knob build. (2) SmolLM2 (flag kernel): attn_off_qkv with and without
# o_off_attn (o pieces off the ATTN workers) at ctx 32 / 4064.
cd "$(dirname "$0")/.." || exit 1
exec > >(tee "${OUT:-/tmp}/call2.log") 2>&1
source scripts/ab_common.sh
build base
keep_so base
timeout 150 python3 scripts/wait_bound.py --rounds 3 --handoff auto --max-cache 4160 \
  --variants "attn_off_qkv=1;attn_off_qkv=1@o_off_attn=1;o_off_attn=1" \
  --models "smollm2-135m:32,4064" 2>&1 | grep -v Warning | grep "BOUND\|rror"
build combine TILES_COMBINE_UNROLL=1
keep_so combine
timeout 90 python3 -m pytest -q -x tests/test_cuda_kernel.py \
  -k "long_context or matches_cpu or bit_identical_repeats or latency_options" 2>&1 | tail -3
swap_ab "llama-3.2-1b:32,4064,16000" base combine
echo "total t=$(( $(date +%s) - AB_T0 ))"
