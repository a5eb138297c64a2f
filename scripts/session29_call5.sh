#!/bin/bash
# Session 29, call 5 (result: stealing REJECTED, +170 us with no waits; perf log, session 29). Issue 8's
# reopening question in a probe: does work stealing at the stage ends (scripts/boundary_probe.cu, path "steal": each
# block's last pool % of a stage's 4 KB items shared by all warps, claimed by a global atomic) take the stragglers
# out of the ~2 us per all-to-all wait? Prints every path of the probe: plain with and without waits is the
# reference. ~1 min.
cd "$(dirname "$0")/.." || exit 1
exec > >(tee "${OUT:-/tmp}/call5.log") 2>&1
source scripts/ab_common.sh
run_probe boundary_probe 120
