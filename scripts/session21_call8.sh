#!/bin/bash
# Session 21, call 8 (perf log, session 21, Next item 4). Reading call 6's plans on the CPU: v51 puts ~6 gate/up
# tiles per layer on workers that also run an o tile (v50: 0.1), which start only after it, and DOWN then waits for
# them. gateup_off_o=1 keeps the gate/up pieces off the o workers (SmolLM2: 36 + 96 = 132). Same-process A/B.
cd "$(dirname "$0")/.." || exit 1
exec > >(tee "${OUT:-/tmp}/call8.log") 2>&1
source scripts/ab_common.sh
build tree
timeout 120 python3 scripts/wait_bound.py --rounds 2 --handoff auto --max-cache 4160 --variants "gateup_off_o=1" \
  --models "smollm2-135m:32,4064" 2>&1 | grep -v Warning | grep "BOUND\|rror"
echo "total t=$(( $(date +%s) - AB_T0 ))"
