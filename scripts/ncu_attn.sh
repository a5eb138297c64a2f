#!/bin/bash
# Per-SASS-line stall reasons and shared-memory wavefronts of the decode kernel at 16000 positions and at 32 (run in
# session 24, call 1). ncu (Nsight Compute, on the device image; --clock-control none as the device notes ask)
# profiles the last decode launch of scripts/ncu_attn.py with the WarpStateStats and SourceCounters sections, then
# exports the source page (per SASS instruction: stall samples by reason, wavefronts) and the details page as CSV into
# $OUT. ncu's per-CUDA-line export came back without metrics, so map the SASS rows here with scripts/ncu_lines.py
# against nvdisasm -g -c of the same build compiled locally (its header says how).
cd "$(dirname "$0")/.." || exit 1
exec > >(tee "${OUT:-/tmp}/ncu_attn.log") 2>&1
source scripts/ab_common.sh
build tree
for ctx in 16000 32; do
  ncu_src attn "$ctx" WarpStateStats SourceCounters
  head -c 600 "${OUT:-/tmp}/ncu-attn-$ctx-details.csv"; echo; wc -l "${OUT:-/tmp}/ncu-attn-$ctx-sass.csv"
done
echo "total t=$(( $(date +%s) - AB_T0 ))"
