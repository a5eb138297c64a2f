#!/bin/bash
# Prepared in session 27, run in session 28 (result: every pace level or slower, +0.1 to +0.9%: v67 REJECTED). v67
# (docs/patches/v67-stage-pace.patch): v48's warp-by-warp pace of the staging burst, for QKV, GATEUP and DOWN tiles
# too (TILES_PACE_{QKV,GATEUP,DOWN}_CYCLES, kernel parameters, default 0). At ctx 32 GATEUP's hand-off is 2.15 us
# against O's 0.56 since O is paced (perf log, session 27, call 4).
# Prediction: GATEUP 200 cycles -0.5 to -1.5 us per layer (-1 to -2% at ctx 32), nothing at 4064 beyond that.
# One call: main and the patch built and kept; the pace test on the patch (bit-identical, refusals); then two rounds
# over main and the patch at each pace (one build, env per run), Llama-1B ctx 32 / 4064.
cd "$(dirname "$0")/.." || exit 1
exec > >(tee "${OUT:-/tmp}/call1.log") 2>&1
source scripts/ab_common.sh
build_kept base
patch -p1 -s < docs/patches/v67-stage-pace.patch || exit 1
build_kept pace
timeout 120 python3 -m pytest -q -x tests/test_cuda_kernel.py -k "pace" 2>&1 | tail -2 | sed "s/^/pace /"
patch -p1 -R -s < docs/patches/v67-stage-pace.patch
echo "tests t=$(( $(date +%s) - AB_T0 ))"
run() {  # run LABEL SO QKV GATEUP DOWN
  TILES_PACE_QKV_CYCLES=$3 TILES_PACE_GATEUP_CYCLES=$4 TILES_PACE_DOWN_CYCLES=$5 ab_once "$1" "$2" \
    "llama-3.2-1b:32,4064" 4200
}
for r in 1 2; do
  run "base r$r" base 0 0 0
  for s in 0:0:0 0:100:0 0:200:0 0:300:0 0:0:100 0:0:200 100:0:0 200:0:0 0:200:200; do
    IFS=: read -r q g d <<< "$s"
    run "pace q$q g$g d$d r$r" pace "$q" "$g" "$d"
  done
done
echo "total t=$(( $(date +%s) - AB_T0 ))"
