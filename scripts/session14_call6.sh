#!/usr/bin/env bash
# Session 14, call 6 (~4 min): the warp path's loops fully unrolled (TILES_ATTN_WARPS_UNROLL=1: scores over the 8
# 16-byte pieces of a head_dim-64 row, o over the warp's 8 positions) against main's kernel: opt_ab (Llama-1B
# ctx 32 / 4064 / 16000, SmolLM2 ctx 32), then the kernel GPU tests on the unrolled build.
# (The knob was folded into the code after this call: v46 is the default, and setup.py no longer passes it.)
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/ab_common.sh
build base
abx base
build unroll TILES_ATTN_WARPS_UNROLL=1
abx unroll
timeout 80 python3 -m pytest -q tests/test_cuda_kernel.py 2>&1 | grep -v "Warning\|warnings.warn" | tail -4 | tee $OUT/gputests-unroll.txt
echo "=== done t=$(( $(date +%s) - AB_T0 ))"
