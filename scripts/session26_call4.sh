#!/bin/bash
# Session 26, call 4 (result: all eight sanitizer runs clean; the ATTN tile at 16000 ~27.1K cycles, issue 7.4K,
# combine 3.1K; perf log, session 26): the new default (v63d + v63e) under the sanitizers on
# the default variant (option set 25183; counter and flag hand-offs) and the runtime-options kernel (127), with
# attention tiles of one chunk and of several (cache 1024, position 700), then the ATTN profile of the default at
# 16000 and 4064 (timing builds).
cd "$(dirname "$0")/.." || exit 1
exec > >(tee "${OUT:-/tmp}/call4.log") 2>&1
source scripts/ab_common.sh
build main
sanitize_runs "25183 64 40 counters" "25183 1024 700 counters" "25183 1024 700 flags" "127 1024 700 counters"
attn_prof tc16k 16000 "-DTILES_ATTN_PROFILE"
[ $(( $(date +%s) - AB_T0 )) -lt 420 ] && attn_prof tc4k 4064 "-DTILES_ATTN_PROFILE"
echo "total t=$(( $(date +%s) - AB_T0 ))"
