#!/bin/bash
# Session 16, call 5 (~220 s): plans for fewer workers than SMs (opt_ab --workers), main's kernel. SmolLM2's stages
# are latency-bound (~2.8 us each for ~5-25 KB of weights per worker): does a stage wait less for fewer producers,
# by more than the bytes per worker grow? Llama-1B at 128 workers (cleaner cuts) beside it.
cd "$(dirname "$0")/.." || exit 1
source scripts/ab_common.sh
build main
timeout 200 python3 scripts/opt_ab.py --rounds 2 --opts 25183 --workers 132,96,66,44 --models "smollm2-135m:32" 2>&1 \
  | grep -v Warning | grep "round\|rror" | sed "s/ P plan single 128 o-off 1 a0-off 1 mn 1//"
mv "${OUT:-/tmp}/opt_ab.json" "${OUT:-/tmp}/opt_ab-smol-workers.json" 2>/dev/null
timeout 120 python3 scripts/opt_ab.py --rounds 2 --opts 25183 --workers 132,128 --models "llama-3.2-1b:32" 2>&1 \
  | grep -v Warning | grep "round\|rror" | sed "s/ P plan single 128 o-off 1 a0-off 1 mn 1//"
mv "${OUT:-/tmp}/opt_ab.json" "${OUT:-/tmp}/opt_ab-llama-workers.json" 2>/dev/null
echo "total t=$(( $(date +%s) - AB_T0 ))"
