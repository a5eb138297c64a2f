#!/bin/bash
# Session 26, call 1 (result: tce -5.6% at 16000, -1.0% at 4064, level at 32, SmolLM2 +9%: kept in the counter
# variant only; tcf -4.3% / +0.3% at 32 / SmolLM2 +1.3%: rejected; perf log, session 26).
# Does v63d's prompt-32 cost go away when its chunk code is out of line (v63f), and what do q's fragments in
# registers (v63e) give at 16K? Four builds kept: main (base), tc = TILES_ATTN_TC=1 with the chunk as a function
# (inlined), tcf = the same out of line (TILES_ATTN_TC_OUTLINE=1), tce = session 25's v63e patch (carry .ab: main's
# decode_kernel.cu with docs/patches/v63e-tc-qfrag-regs.patch applied) with TILES_ATTN_TC=1. Kernel tests on tcf,
# then two swap rounds over Llama-1B 32 / 4064 / 16000 and SmolLM2 32.
cd "$(dirname "$0")/.." || exit 1
exec > >(tee "${OUT:-/tmp}/call1.log") 2>&1
source scripts/ab_common.sh
build_pair tc TILES_ATTN_TC=1
build tcf TILES_ATTN_TC=1 TILES_ATTN_TC_OUTLINE=1
keep_so tcf
timeout 150 python3 -m pytest -q -s tests/test_cuda_kernel.py 2>&1 \
  | grep -E "cuda-vs-cpu|smollm2-135m:|llama-3.2-1b:|passed|failed|Error|assert" | tail -30 | sed "s/^/tcf /"
ab_base_in
build tce TILES_ATTN_TC=1
keep_so tce
ab_new_in
swap_ab "llama-3.2-1b:32,4064,16000;smollm2-135m:32" base tc tcf tce
echo "total t=$(( $(date +%s) - AB_T0 ))"
