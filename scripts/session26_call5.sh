#!/bin/bash
# Session 26, call 5 (result: v64 REJECTED, tensor-map copies +2.1% at 16000, +0.7% at 4064 against the same
# build's cp.async; removed, kept as docs/patches/v64-attn-kv-tma.patch, which this script applies to build).
# The K/V chunks by 2-D tensor-map copies (TMA) with the 128-byte swizzle, one build (TILES_ATTN_TMA=1): the kernel
# tests with their accuracy lines, then opt_ab with the copies by tensor map against the same build's cp.async into
# the same swizzled rows (TILES_ATTN_TMA_OFF=1), two rounds, Llama-1B 32 / 4064 / 16000; then the sanitizers on a
# tile of several chunks if time is left.
cd "$(dirname "$0")/.." || exit 1
exec > >(tee "${OUT:-/tmp}/call5.log") 2>&1
source scripts/ab_common.sh
build_patched tma docs/patches/v64-attn-kv-tma.patch TILES_ATTN_TMA=1 || exit 1
timeout 100 python3 -m pytest -q -s --timeout 60 tests/test_cuda_kernel.py 2>&1 \
  | grep -E "cuda-vs-cpu|smollm2-135m:|llama-3.2-1b:|passed|failed|Error|rror:|assert" | tail -30 | sed "s/^/tma /"
echo "tests t=$(( $(date +%s) - AB_T0 ))"
for r in 1 2; do
  for v in off on; do
    off=0; [ $v = off ] && off=1
    TILES_ATTN_TMA_OFF=$off timeout 60 python3 scripts/opt_ab.py --rounds 1 --max-cache 16512 --opts 25183 \
      --models "llama-3.2-1b:32,4064,16000" 2>&1 | grep -v Warning | grep "round\|rror" \
      | sed "s/^/$v r$r /; s/ P plan single 128 o-off 1 a0-off 1 mn 1//"
  done
done
echo "ab t=$(( $(date +%s) - AB_T0 ))"
if [ $(( $(date +%s) - AB_T0 )) -lt 180 ]; then
  TILES_KERNEL_OPT=25183 SANITIZE_CACHE=1024 SANITIZE_POS=700 TILES_HANDOFF=counters SANITIZE_TIMEOUT=40 \
    SANITIZE_LOGDIR="${OUT:-/tmp}" bash scripts/sanitize.sh
fi
echo "total t=$(( $(date +%s) - AB_T0 ))"
