#!/bin/bash
# Session 17, call 8 (~3 min): v48 (TILES_PACE_O_CYCLES default 200) built as the product: the GPU suite, then opt_ab
# against the same build at 0 (two rounds, Llama-1B 32 / 4064, SmolLM2 32).
cd "$(dirname "$0")/.." || exit 1
source scripts/ab_common.sh
build v48
timeout 150 python3 -P -m pytest tests -q -k "cuda or gpu" 2>&1 | tail -2
timeout 150 python3 scripts/opt_ab.py --rounds 2 --opts "25183,25183@TILES_PACE_O_CYCLES=0" \
  --models "llama-3.2-1b:32,4064;smollm2-135m:32" 2>&1 | grep -v Warning | grep "round\|rror" \
  | sed "s/ P plan single 128 o-off 1 a0-off 1 mn 1//"
mv "${OUT:-/tmp}/opt_ab.json" "${OUT:-/tmp}/opt_ab-v48.json" 2>/dev/null || true
echo "total t=$(( $(date +%s) - AB_T0 ))"
