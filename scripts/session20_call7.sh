#!/bin/bash
# Session 20, call 7 (perf log, session 20; TILES_L2_NEXT was removed after it: +2%, rejected). TILES_L2_NEXT=1:
# each warp's lane 0 asks L2 for its first item's second batch right after the wait, before the input reads (counter
# kernels; Llama-1B's GATEUP and DOWN items have more than one batch). A/B against the tree's default build in the
# same call, then the kernel tests on the knob build.
cd "$(dirname "$0")/.." || exit 1
exec > >(tee "${OUT:-/tmp}/call7.log") 2>&1
source scripts/ab_common.sh
export AB_MODELS="llama-3.2-1b:32,4064" AB_TIMEOUT=100
build base
abx base
build l2next TILES_L2_NEXT=1
abx l2next
timeout 90 python3 -m pytest -q -x tests/test_cuda_kernel.py \
  -k "long_context or matches_cpu or bit_identical_repeats or latency_options" 2>&1 | tail -3
echo "total t=$(( $(date +%s) - AB_T0 ))"
