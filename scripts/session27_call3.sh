#!/bin/bash
# Session 27, call 3 (result: all clean, bit-identical; ATTN tile at 16000 ~24.0K cycles, 4064 ~8.1K; perf log).
# Checks of the new default (v65 + v66, commit fd355bd):
# kernel_check --quick (every latency-option set bit-identical, parity), compute-sanitizer memcheck and racecheck on
# the default variant (counters; attention tiles of one chunk and of several) and the runtime-options kernel (127)
# (the flag variant's SASS is unchanged), then the ATTN profile of the new default at 4064 and 16000.
cd "$(dirname "$0")/.." || exit 1
exec > >(tee "${OUT:-/tmp}/call3.log") 2>&1
source scripts/ab_common.sh
kernel_check_quick
sanitize_runs "25183 64 40 counters" "25183 1024 700 counters" "127 1024 700 counters"
attn_prof p4k 4064 "-DTILES_ATTN_PROFILE"
[ $(( $(date +%s) - AB_T0 )) -lt 480 ] && attn_prof p16k 16000 "-DTILES_ATTN_PROFILE"
echo "total t=$(( $(date +%s) - AB_T0 ))"
