#!/bin/bash
# Prepared in session 19 (perf log, "Next (issue 8), after session 19", items 5 and 3), NOT run. ~4 min with the start.
# First scripts/notify_probe.cu (~30 s): does a hand-off reach an SM sooner when one block per cluster polls and
# tells its peers through distributed shared memory, while every SM has 64 KB of staging in flight?
# SmolLM2's planner variants on the kernel it ships with (flags): session 19 measured them with counters only
# (o_rows=16 -2.8%, attn_partitions=1 -2.3% at ctx 32). Same-process A/B (scripts/wait_bound.py --handoff auto),
# ctx 32 and 4064 (attn_partitions=1 is for short contexts only: 4064 shows what it would cost there).
cd "$(dirname "$0")/.." || exit 1
exec > >(tee "${OUT:-/tmp}/call1.log") 2>&1
source scripts/ab_common.sh
run_probe notify_probe 120
build tree
timeout 240 python3 scripts/wait_bound.py --rounds 3 --handoff auto \
  --variants "o_rows=16;o_rows=32;attn_partitions=1;o_rows=16@attn_partitions=1" \
  --models "smollm2-135m:32,4064" 2>&1 | grep -v Warning | grep "BOUND\|rror\|options"
echo "total t=$(( $(date +%s) - AB_T0 ))"
