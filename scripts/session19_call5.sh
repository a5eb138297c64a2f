#!/bin/bash
# Session 19, call 5 (perf log, session 19): MERGE's o words in the same L2 round trip as m and l (merge_tile,
# counter kernels; bit-identical by construction). Base = main's decode_kernel.cu carried as .ab/decode_kernel.cu.
# Ctx 32 never runs merge_tile (LocalMerge): a difference there is codegen, not the change.
cd "$(dirname "$0")/.." || exit 1
exec > >(tee "${OUT:-/tmp}/call5.log") 2>&1
source scripts/ab_common.sh
export AB_MODELS="llama-3.2-1b:32,4064,16000"
ab_base_in
build base
abx base
ab_new_in
build new
abx new
timeout 150 python3 -m pytest -q -x tests/test_cuda_kernel.py \
  -k "long_context or matches_cpu or bit_identical_repeats or latency_options" 2>&1 | tail -4
echo "total t=$(( $(date +%s) - AB_T0 ))"
