#!/bin/bash
# Session 22, call 2 (perf log, session 22; v54 kept, the knob removed). v54 (build knob TILES_LM_SMEM=1): an
# LM-head tile keeps its logits in shared memory too, so that its partial argmax needs no fence and no L2 read-back
# (call 1's tile timing: the LMHEAD critical tile's epilogue 4.7 us). The kernel tests on the knob build, then the
# two builds' .so swapped in turn.
cd "$(dirname "$0")/.." || exit 1
exec > >(tee "${OUT:-/tmp}/call2.log") 2>&1
source scripts/ab_common.sh
build_pair lm TILES_LM_SMEM=1
timeout 200 python3 -m pytest -q -x tests/test_cuda_kernel.py 2>&1 | tail -3
swap_ab "llama-3.2-1b:32,4064;smollm2-135m:32,4064" base lm
echo "total t=$(( $(date +%s) - AB_T0 ))"
