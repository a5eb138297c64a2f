#!/usr/bin/env bash
# Session 10's second device call (~9 min), from the repository root on the GPU machine:
#   base    main at 9f4d91d (its decode_kernel.cu carried in .ab/)       bits saved, opt_ab
#   serial  v33: matvec shape before the wait, block_sum with 2 barriers  bits compared (identical), opt_ab
#   late    + v34 TILES_STAGE_LATE=1                                       bits, opt_ab, GPU suite, ctx-32 timing
#   mma1    + v30 TILES_ATTN_MMA=1                                         max diff, opt_ab, 16K timing, GPU suite
#   flags   + TILES_FLAGS=1 (session 9's race fix)                         GPU suite (if time is left)
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/ab_common.sh
O=${OUT:-/tmp}
el() { echo $(( $(date +%s) - AB_T0 )); }
suite() {  # tag [pytest -k expression]
  timeout 150 python3 -P -m pytest tests -q -rfs -k "${2:-cuda or gpu}" -p no:cacheprovider 2>&1 \
    | grep -E "^(FAILED|ERROR)|passed|failed|Error" | cut -c1-300 | tee "$O/gputests-$1.log"
}
timing() {  # tag ctx defines
  TILES_TIMING_DEFINES="$3" timeout 120 python3 scripts/tile_timing.py --model llama-3.2-1b --ctx "$2" --steps 4 \
    --opts 25183 --json "$O/tt-$2-$1.json" 2>&1 | grep -v Warning | grep -E "us/token|^[A-Z]+ +16 |^LMHEAD" | sed "s/^/$1 /"
}
cp csrc/cuda/decode_kernel.cu /tmp/new.cu
cp .ab/decode_kernel.cu csrc/cuda/decode_kernel.cu
build base
cp /tmp/new.cu csrc/cuda/decode_kernel.cu
timeout 60 python3 scripts/lean_check.py save /tmp/ref.pt 2>&1 | tail -1
ab base 25183 1
build serial
timeout 60 python3 scripts/lean_check.py compare /tmp/ref.pt 2>&1 | tail -2
ab serial 25183 1
build late TILES_STAGE_LATE=1
timeout 60 python3 scripts/lean_check.py compare /tmp/ref.pt 2>&1 | tail -2
ab late 25183 1
suite late
[ "$(el)" -lt 330 ] && timing late 32 -DTILES_STAGE_LATE
build mma1 TILES_ATTN_MMA=1
timeout 60 python3 scripts/lean_check.py compare /tmp/ref.pt 2>&1 | tail -2
ab mma1 25183 1
timing mma1 16384 -DTILES_ATTN_MMA=1
[ "$(el)" -lt 470 ] && suite mma1 "(cuda or gpu) and not latency_options"
if [ "$(el)" -lt 480 ]; then build flags TILES_FLAGS=1; suite flags; fi
echo "=== done t=$(el)"
