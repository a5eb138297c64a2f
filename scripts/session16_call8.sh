#!/bin/bash
# Session 16, call 8 (~250 s): main's default variant without the weight staging (TILES_DEFAULT_OPT=25179: 25183
# less kOptStageWeights) against main. scripts/boundary_probe.cu measured 64 KB of cp.async staging before each wait
# ~0.3 us per boundary slower than none, and 64 KB preloaded into registers ~0.25 us faster.
cd "$(dirname "$0")/.." || exit 1
source scripts/ab_common.sh
abl() {
  timeout 80 python3 scripts/opt_ab.py --rounds 2 --opts "$2" --models "llama-3.2-1b:32,4064" 2>&1 \
    | grep -v Warning | grep "round\|rror" | sed "s/^/$1 /; s/ P plan single 128 o-off 1 a0-off 1 mn 1//"
}
build base
abl base 25183
build nostage TILES_DEFAULT_OPT=25179
abl nostage 25179
echo "total t=$(( $(date +%s) - AB_T0 ))"
