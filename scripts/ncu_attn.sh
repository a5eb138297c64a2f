#!/bin/bash
# Prepared in session 23, NOT yet run (perf log, session 23's Next item 1): per-SASS-line stall reasons of the decode
# kernel at 16000 positions (and 32), where the attention warp path's scores take ~1.6K cycles per chunk for reasons
# two rejected designs (v56, v59) guessed wrong. ncu (Nsight Compute, on the device image; --clock-control none as
# the device notes ask) profiles the last decode launch of scripts/ncu_attn.py with the WarpStateStats and
# SourceCounters sections, then exports the source page (per SASS instruction: stall samples by reason) and the
# details page as CSV into $OUT. Session 7 used ncu the same way on an older kernel (perf log, session 7).
cd "$(dirname "$0")/.." || exit 1
exec > >(tee "${OUT:-/tmp}/ncu_attn.log") 2>&1
source scripts/ab_common.sh
build tree
warm=3  # launches before the profiled one (ncu_attn.py --warm, ncu --launch-skip)
for ctx in 16000 32; do
  rep="${OUT:-/tmp}/ncu-attn-$ctx"
  timeout 240 ncu --clock-control none -k regex:decode --launch-skip "$warm" --launch-count 1 \
    --section WarpStateStats --section SourceCounters -f -o "$rep" \
    python3 scripts/ncu_attn.py --ctx "$ctx" --warm "$warm" 2>&1 \
    | grep -v "^==PROF==" | tail -5
  ncu -i "$rep.ncu-rep" --page details --csv > "$rep-details.csv" 2>&1
  ncu -i "$rep.ncu-rep" --page source --csv --print-source sass > "$rep-sass.csv" 2>&1
  head -c 600 "$rep-details.csv"; echo; wc -l "$rep-sass.csv"
done
echo "total t=$(( $(date +%s) - AB_T0 ))"
