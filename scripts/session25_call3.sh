#!/bin/bash
# Session 25, call 3 (perf log v63c; result: -3.0% at 16000, +1.0% at 32, +1.4% SmolLM2; superseded by v63d).
# v63b (call 2: -2.2% at 16000, +1.2% at 32) with ldmatrix free of a "memory"
# clobber, and the warp path's head_dim 64 as a constant in the K/V copy issue and the combine (no runtime division).
# Kernel tests on the knob build, the same-process swap against main, then ncu (SourceCounters) of the knob build at
# 16000 and at 32 for scripts/ncu_lines.py against the local listing (bash scripts/local_sass.sh tc -DTILES_ATTN_TC=1).
cd "$(dirname "$0")/.." || exit 1
exec > >(tee "${OUT:-/tmp}/call3.log") 2>&1
source scripts/ab_common.sh
knob_acc tc TILES_ATTN_TC=1 "llama-3.2-1b:32,4064,16000;smollm2-135m:32"
ncu_src tc 16000
ncu_src tc 32
ls -la "${OUT:-/tmp}"/ncu-* 2>&1 | tail -4
echo "total t=$(( $(date +%s) - AB_T0 ))"
