#!/bin/bash
# Prepared in session 20 (perf log, "Next (issue 8), after session 20", item 2), NOT run. ~2.5 min with the start.
# SmolLM2 at long context: session 20's call 8 found qkv pieces of 32 rows -3.4% at ctx 4064 (+2.3% at 32), most
# likely because fewer qkv workers leave the ATTN partitions 1..P-1 free workers. attn_off_qkv=1 places every ATTN
# tile off its layer's qkv workers (partition 0 already is), one plan for every context. Same-process A/B on the
# flag kernel, ctx 32 / 4064 / 16000 (Llama-1B: the option cannot apply, its plan is unchanged; tested on the CPU).
cd "$(dirname "$0")/.." || exit 1
exec > >(tee "${OUT:-/tmp}/call1.log") 2>&1
source scripts/ab_common.sh
build tree
timeout 200 python3 scripts/wait_bound.py --rounds 3 --handoff auto --max-cache 16512 --variants "attn_off_qkv=1" \
  --models "smollm2-135m:32,4064,16000" 2>&1 | grep -v Warning | grep "BOUND\|rror"
echo "total t=$(( $(date +%s) - AB_T0 ))"
