#!/bin/bash
# Session 20, call 2 (perf log, session 20; TILES_PEEK was removed after it: rejected). (1) TILES_PEEK=1: thread 0
# reads a tile's first wait counter before the tile's staging is issued (counter kernels), A/B against the tree's
# default build in the same call.
# (2) Planner cuts on the base build (same process, wait_bound.py): SmolLM2's o floor of 16 rows against the old
# cut (o_min_rows=0), and a floor for every matvec cut (min_rows 8 / 16), SmolLM2 on its flag kernel, Llama-1B.
cd "$(dirname "$0")/.." || exit 1
exec > >(tee "${OUT:-/tmp}/call2.log") 2>&1
source scripts/ab_common.sh
export AB_MODELS="llama-3.2-1b:32,4064;smollm2-135m:32" AB_TIMEOUT=150
build base
abx base
build peek TILES_PEEK=1
abx peek
timeout 120 python3 -m pytest -q -x tests/test_cuda_kernel.py \
  -k "long_context or matches_cpu or bit_identical_repeats or latency_options" 2>&1 | tail -4
echo "tests t=$(( $(date +%s) - AB_T0 ))"
timeout 200 python3 scripts/wait_bound.py --rounds 3 --handoff auto \
  --variants "o_min_rows=0;min_rows=8;min_rows=16" \
  --models "smollm2-135m:32,4064;llama-3.2-1b:32" 2>&1 | grep -v Warning | grep "BOUND\|rror\|options"
echo "total t=$(( $(date +%s) - AB_T0 ))"
