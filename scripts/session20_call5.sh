#!/bin/bash
# Session 20, call 5 (perf log, session 20, Next item 1): v50 made SmolLM2's stages fewer, larger tiles. Llama-1B's
# o projection in fewer pieces of exactly 24 / 32 / 48 / 64 rows (o_rows; all off the MERGE workers), so that the
# workers without an o tile reach their gate/up tile (and stage it) a tile earlier. Same-process A/B, counters.
cd "$(dirname "$0")/.." || exit 1
exec > >(tee "${OUT:-/tmp}/call5.log") 2>&1
source scripts/ab_common.sh
build tree
timeout 200 python3 scripts/wait_bound.py --rounds 3 --handoff auto \
  --variants "o_rows=24;o_rows=32;o_rows=48;o_rows=64" \
  --models "llama-3.2-1b:32,4064" 2>&1 | grep -v Warning | grep "BOUND\|rror"
echo "total t=$(( $(date +%s) - AB_T0 ))"
