#!/bin/bash
# Prepared in session 16 (perf log, "Next (issue 8), after session 16", item 1), not run: are the stragglers at a
# dependency wait the same SMs every time? (1) scripts/boundary_probe.cu with its straggler trace (per wait: the last
# block's stage end behind the median's and the first's, the median's wake after it, the split-half correlation of
# each block's lateness, the blocks most often last); (2) the product kernel's tile timing at Llama-1B ctx 32 over
# 16 steps, whose per-worker table gives the same correlation per stage. ~90 s with the machine's start.
cd "$(dirname "$0")/.." || exit 1
source scripts/ab_common.sh
nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a scripts/boundary_probe.cu -o /tmp/bp && timeout 60 /tmp/bp
build main
timeout 120 python3 scripts/tile_timing.py --model llama-3.2-1b --ctx 32 --steps 16 --opts 25183 2>&1 \
  | grep -v Warning | tail -22
echo "total t=$(( $(date +%s) - AB_T0 ))"
