#!/bin/bash
# Session 23, call 4 (perf log, session 23; v59 rejected, +1.4 to +6.6%: the knob was removed). v59 (build knob
# TILES_ATTN_LANEDOT=1): the attention warp path's scores one lane per (head, 8 dims): one K piece per position per
# lane, three shuffles per (position, head), the softmax in each lane without shuffles (call 3's profile: the scores
# took 1.6K cycles per chunk, thought bound by shared-memory wavefronts). New summation order, so the bits differ
# from the base build: the kernel tests (CPU parity, bit-identity across option sets) on the knob build, the two
# builds' .so in turn, then the other GPU tests on it if time is left.
cd "$(dirname "$0")/.." || exit 1
exec > >(tee "${OUT:-/tmp}/call4.log") 2>&1
source scripts/ab_common.sh
knob_ab ld TILES_ATTN_LANEDOT=1 "3000" "llama-3.2-1b:32,4064,16000;smollm2-135m:32"
if [ $(( $(date +%s) - AB_T0 )) -lt 300 ]; then
  timeout 120 python3 -P -m pytest tests -q -x -k "(cuda or gpu) and not test_cuda_kernel" 2>&1 | tail -3
fi
echo "total t=$(( $(date +%s) - AB_T0 ))"
