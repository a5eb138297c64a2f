#!/bin/bash
# Prepared in session 28, run in session 29 call 1 (result: all clean; perf log, session 29). The checks owed on
# v66f (commit 05f48c3: the flag variant's combine out of line; its bits equal main's by lean_check and the GPU suite
# passed, but no sanitizer had run on it): kernel_check --quick (every latency-option set bit-identical, parity), then
# compute-sanitizer memcheck and racecheck on the flag variant with attention tiles of one chunk and of several. The
# counter variant's SASS is the one session 27's call 3 checked (ae53092c). ~200 s.
cd "$(dirname "$0")/.." || exit 1
exec > >(tee "${OUT:-/tmp}/call1.log") 2>&1
source scripts/ab_common.sh
kernel_check_quick
sanitize_runs "25183 64 40 flags" "25183 1024 700 flags"
echo "total t=$(( $(date +%s) - AB_T0 ))"
