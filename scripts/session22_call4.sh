#!/bin/bash
# Session 22, call 4 (perf log, session 22; rejected, bit-identical but no gain: the knob was removed). v55 (build
# knob TILES_COMBINE_FACTORS=1): the ATTN tile's combine of its warps' states computes exp(m_w - M) once per (warp,
# head) instead of in each of the head's 64 element threads (call 3's profile: the combine takes ~3.2K cycles per
# tile at 4K and 16K positions). Bits against the base build (lean_check at positions 40 and 3000), the kernel tests
# on the knob build, then the two builds' .so in turn.
cd "$(dirname "$0")/.." || exit 1
exec > >(tee "${OUT:-/tmp}/call4.log") 2>&1
source scripts/ab_common.sh
build base
keep_so base
for p in 40 3000; do timeout 90 python3 scripts/lean_check.py save /tmp/ref$p.pt $p 2>&1 | tail -1; done
build cf TILES_COMBINE_FACTORS=1
keep_so cf
for p in 40 3000; do timeout 90 python3 scripts/lean_check.py compare /tmp/ref$p.pt $p 2>&1 | tail -2; done
timeout 120 python3 -m pytest -q -x tests/test_cuda_kernel.py \
  -k "long_context or matches_cpu or bit_identical or latency_options or flag_and_counter" 2>&1 | tail -2
swap_ab "llama-3.2-1b:4064,16000,32;smollm2-135m:32,4064" base cf
echo "total t=$(( $(date +%s) - AB_T0 ))"
