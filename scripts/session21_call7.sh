#!/bin/bash
# Session 21, call 7 (perf log, session 21; the knob was removed after it: +2% at 4064). TILES_O_NOSTAGE_LONG=1:
# past attn_single positions (MERGE not local) an o tile after an ATTN tile does not stage its first batch, so that
# MERGE's L2 round trip (3.3 us at 4064) does not queue behind 124 workers' staging. Counter kernel only. The two
# builds' .so swapped in turn.
cd "$(dirname "$0")/.." || exit 1
exec > >(tee "${OUT:-/tmp}/call7.log") 2>&1
source scripts/ab_common.sh
so() { ls tiles_ext/_C*.so; }
build base
cp "$(so)" /tmp/so_base
build nostage TILES_O_NOSTAGE_LONG=1
cp "$(so)" /tmp/so_nostage
for r in 1 2; do
  for v in base nostage; do
    cp /tmp/so_$v "$(so)"
    timeout 60 python3 scripts/opt_ab.py --rounds 1 --max-cache 16512 --opts 25183 \
      --models "llama-3.2-1b:4064,16000,32" 2>&1 | grep -v Warning | grep "round\|rror" \
      | sed "s/^/$v r$r /; s/ P plan single 128 o-off 1 a0-off 1 mn 1//"
  done
done
echo "total t=$(( $(date +%s) - AB_T0 ))"
