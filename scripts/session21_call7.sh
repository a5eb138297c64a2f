#!/bin/bash
# Session 21, call 7 (perf log, session 21; the knob was removed after it: +2% at 4064). TILES_O_NOSTAGE_LONG=1:
# past attn_single positions (MERGE not local) an o tile after an ATTN tile does not stage its first batch, so that
# MERGE's L2 round trip (3.3 us at 4064) does not queue behind 124 workers' staging. Counter kernel only. The two
# builds' .so swapped in turn.
cd "$(dirname "$0")/.." || exit 1
exec > >(tee "${OUT:-/tmp}/call7.log") 2>&1
source scripts/ab_common.sh
build_pair nostage TILES_O_NOSTAGE_LONG=1
swap_ab "llama-3.2-1b:4064,16000,32" base nostage
echo "total t=$(( $(date +%s) - AB_T0 ))"
