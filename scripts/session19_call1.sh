#!/bin/bash
# Prepared in session 18 (perf log, "Next (issue 8), after session 18", items 1 and 4), NOT run. ~3 min; no carry.
# 1. scripts/reduce_probe.cu: what a fused MLP stage's int64 split-K reduction costs at the stage's end, against
#    today's GATEUP epilogue (docs/design/fused-mlp.md; stop that design if its hand-off is > 1 us above "signal only");
#    then scripts/boundary_probe.cu's "fused" rows: the weight stream with three waits per layer, one of them after
#    the reduction, against four (the design pays if they save more than ~1% of the four-stage rows).
# 2. The ATTN input phase's late K/V copies: a timing build with TILES_ATTN_LANDING prints, for the partition-0 ATTN
#    tile of KV head 0 in the last layer, how long its wait lasted (so how early its copies were issued) and when each
#    warp's copies had landed after the wait; Llama-1B ctx 32 and 100.
cd "$(dirname "$0")/.." || exit 1
# Everything also goes to $OUT/call1.log: session 19's first run lost the probe tables to the output tail's 12K limit.
exec > >(tee "${OUT:-/tmp}/call1.log") 2>&1
source scripts/ab_common.sh
nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a scripts/reduce_probe.cu -o /tmp/reduce_probe \
  && timeout 90 /tmp/reduce_probe
# The same question end to end: Llama-1B's weight stream with the kernel's waits, four stages per layer against the
# fused MLP's three (its last ended by the int64 reduction); the "fused" rows against the rows of the same path.
nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a scripts/boundary_probe.cu -o /tmp/boundary_probe \
  && timeout 90 /tmp/boundary_probe | grep -v stragglers
echo "probe t=$(( $(date +%s) - AB_T0 ))"
build tree  # tile_timing imports tiles_ext (the model helpers)
for ctx in 32; do
  TILES_TIMING_BUILD=/tmp/tt_land TILES_TIMING_DEFINES="-DTILES_ATTN_LANDING" timeout 120 python3 \
    scripts/tile_timing.py --model llama-3.2-1b --ctx $ctx --steps 8 --opts 25183 > "${OUT:-/tmp}/tt$ctx.txt" 2>&1
  grep ATTNLAND "${OUT:-/tmp}/tt$ctx.txt" | head -6
  grep -E "us/token|^(QKV|ATTN|MERGE|O) |  ATTN " "${OUT:-/tmp}/tt$ctx.txt"
done
echo "total t=$(( $(date +%s) - AB_T0 ))"
