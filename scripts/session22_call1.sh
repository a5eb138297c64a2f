#!/bin/bash
# Session 22, call 1 (perf log, session 22; the knob was removed after it: +2% at 4064). v53 (build knob
# TILES_ATTN_PRESTAGE2=1): an ATTN tile of more than one chunk stages its second chunk before the wait too. Kernel
# tests on the knob build, the two builds' .so swapped in turn (Llama-1B 4064 / 16000 / 32, SmolLM2 4064), then
# tile_timing of Llama-1B ctx 4064 on the knob build.
cd "$(dirname "$0")/.." || exit 1
exec > >(tee "${OUT:-/tmp}/call1.log") 2>&1
source scripts/ab_common.sh
build_pair p2 TILES_ATTN_PRESTAGE2=1
timeout 150 python3 -m pytest -q -x tests/test_cuda_kernel.py \
  -k "long_context or matches_cpu or bit_identical or latency_options or flag_and_counter" 2>&1 | tail -3
swap_ab "llama-3.2-1b:4064,16000,32;smollm2-135m:4064" base p2
echo "=== tile_timing p2: llama-3.2-1b ctx 4064"
TILES_TIMING_DEFINES=-DTILES_ATTN_PRESTAGE2=1 TILES_TIMING_BUILD=/tmp/tt timeout 120 python3 scripts/tile_timing.py \
  --model llama-3.2-1b --ctx 4064 --steps 8 --opts 25183 --json "${OUT:-/tmp}/tt-p2-l4064.json" 2>&1 \
  | grep -v Warning | sed -n '/us\/token/,$p' | grep -v "^$"
echo "total t=$(( $(date +%s) - AB_T0 ))"
