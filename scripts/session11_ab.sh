#!/usr/bin/env bash
# Session 11's first device call (~8 min), branch wip/session11, from the repository root on the GPU machine.
# Before the call, here: mkdir -p .ab && git show main:csrc/cuda/decode_kernel.cu > .ab/decode_kernel.cu
# (.ab is in .git/info/exclude; the call carries it: carry [".ab"]).
#   base  main's decode_kernel.cu (v35)                                         bits saved, opt_ab 2 rounds
#   v36   merge_tile, the long-vector RMSNorm and the LM head's partial argmax
#         out of line in the default variant                                   bits compared, opt_ab 2 rounds,
#                                                                              the kernel GPU tests
#   mma2  v36 + TILES_ATTN_MMA=2 (v31 with less code around it, v30 no longer its
#         fallback, v37: combine over used warps, half the o accumulators)     opt_ab 1 round, 16K timing
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/ab_common.sh
ab_base_in
build base
ab_new_in
timeout 60 python3 scripts/lean_check.py save /tmp/ref.pt 2>&1 | tail -1
ab base 25183 2
build v36
timeout 60 python3 scripts/lean_check.py compare /tmp/ref.pt 2>&1 | tail -2
ab v36 25183 2
timeout 90 python3 -P -m pytest tests/test_cuda_kernel.py -q -p no:cacheprovider 2>&1 \
  | grep -E "^(FAILED|ERROR)|passed|failed" | cut -c1-300 | tee "${OUT:-/tmp}/gputests-v36.log"
build mma2 TILES_ATTN_MMA=2
ab mma2 25183 1
TILES_TIMING_DEFINES=-DTILES_ATTN_MMA=2 timeout 120 python3 scripts/tile_timing.py --model llama-3.2-1b --ctx 16384 \
  --steps 4 --opts 25183 --json "${OUT:-/tmp}/tt-16k-mma2.json" 2>&1 | grep -E "us/token|^ATTN|^MERGE" | sed "s/^/mma2 /"
echo "=== done t=$(( $(date +%s) - AB_T0 ))"
