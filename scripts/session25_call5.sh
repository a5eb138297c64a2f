#!/bin/bash
# Session 25, call 5 (result: at 32 the knob build and main have the same ncu samples, 104104 vs 104102, and -0.06%
# executed instructions: no region where v63d's +0.8% sits).
# Where v63d's +0.8% at prompt 32 goes. ncu (SourceCounters) of one decode launch at 32 for main's
# build and for the knob build (TILES_ATTN_TC=1) in the same call, then the knob build at 16000. Map each with
# scripts/ncu_lines.py against the local listings (bash scripts/local_sass.sh off; ... tcd -DTILES_ATTN_TC=1).
cd "$(dirname "$0")/.." || exit 1
exec > >(tee "${OUT:-/tmp}/call5.log") 2>&1
source scripts/ab_common.sh
build base
ncu_src base 32
build tc TILES_ATTN_TC=1
ncu_src tcd 32
ncu_src tcd 16000
ls -la "${OUT:-/tmp}"/ncu-* 2>&1 | tail -6
echo "total t=$(( $(date +%s) - AB_T0 ))"
