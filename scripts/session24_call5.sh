#!/bin/bash
# Session 24, call 5 (perf log, session 24; v62b REJECTED, +0.4% at ctx 32, -1.1% at 16000: the knob was removed, the
# change is docs/patches/v62b-attn-lanemap.patch). v62b: v62's lane map (build knob TILES_ATTN_LANEMAP=1) with the o
# layout read from the plain lane index at function scope (og = lane & 3, od0 = (lane >> 2) * 8; one instruction each,
# as in main) and only the scores layout re-read per chunk. Still a 4-byte spill. Is v62's +0.6% at ctx 32 this layout's
# code, or noise of layout? Same bits expected. knob_ab only (bits at two positions, the kernel tests, the swap).
cd "$(dirname "$0")/.." || exit 1
exec > >(tee "${OUT:-/tmp}/call5.log") 2>&1
source scripts/ab_common.sh
knob_ab lmb TILES_ATTN_LANEMAP=1 "40 16000" "llama-3.2-1b:32,4064,16000;smollm2-135m:32"
echo "total t=$(( $(date +%s) - AB_T0 ))"
