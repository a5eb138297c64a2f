#!/bin/bash
# Session 27, call 3 (result: all clean, bit-identical; ATTN tile at 16000 ~24.0K cycles, 4064 ~8.1K; perf log).
# Checks of the new default (v65 + v66, commit fd355bd):
# kernel_check --quick (every latency-option set bit-identical, parity), compute-sanitizer memcheck and racecheck on
# the default variant (counters; attention tiles of one chunk and of several) and the runtime-options kernel (127)
# (the flag variant's SASS is unchanged), then the ATTN profile of the new default at 4064 and 16000.
cd "$(dirname "$0")/.." || exit 1
exec > >(tee "${OUT:-/tmp}/call3.log") 2>&1
source scripts/ab_common.sh
build main
timeout 160 python3 scripts/kernel_check.py --quick --no-baseline 2>&1 | grep -v Warning | tail -25
echo "kernel_check t=$(( $(date +%s) - AB_T0 ))"
for run in "25183 64 40" "25183 1024 700" "127 1024 700"; do
  set -- $run
  echo "=== sanitize opt $1 cache $2 pos $3 handoff counters"
  TILES_KERNEL_OPT=$1 SANITIZE_CACHE=$2 SANITIZE_POS=$3 TILES_HANDOFF=counters SANITIZE_TIMEOUT=80 \
    SANITIZE_LOGDIR="${OUT:-/tmp}" bash scripts/sanitize.sh
  echo "t=$(( $(date +%s) - AB_T0 ))"
done
attn_prof p4k 4064 "-DTILES_ATTN_PROFILE"
[ $(( $(date +%s) - AB_T0 )) -lt 480 ] && attn_prof p16k 16000 "-DTILES_ATTN_PROFILE"
echo "total t=$(( $(date +%s) - AB_T0 ))"
