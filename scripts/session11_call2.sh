#!/usr/bin/env bash
# Session 11's second device call (~8 min), from the repository root on the GPU machine.
# Before the call, here: mkdir -p .ab && git show <flags commit>:csrc/cuda/decode_kernel.cu > .ab/decode_kernel.cu
# (.ab is in .git/info/exclude; the call carries it: carry [".ab"]).
#   base  the per-model hand-off choice (flag variant for SmolLM2), no v38     GPU suite, bits saved,
#                                                                            opt_ab flags vs counters, 2 rounds
#   v38   + the item's next batch loaded before the staged batch's arithmetic  bits compared, opt_ab 2 rounds,
#                                                                            the kernel GPU tests
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/ab_common.sh
ab_base_in
build base
python3 -c "import tiles_ext._C as c; print('FLAG_HANDOFFS', c.FLAG_HANDOFFS, 'FLAG_HANDOFF_OPT', c.FLAG_HANDOFF_OPT)"
timeout 170 python3 -P -m pytest tests -q -k "cuda or gpu" -p no:cacheprovider > "${OUT:-/tmp}/gputests-base.log" 2>&1
grep -E "^(FAILED|ERROR)|passed|failed" "${OUT:-/tmp}/gputests-base.log" | cut -c1-300
echo "suite done t=$(( $(date +%s) - AB_T0 ))"
timeout 60 python3 scripts/lean_check.py save /tmp/ref.pt 2>&1 | tail -1
ab base "25183,25183@TILES_HANDOFF=counters" 2
ab_new_in
build v38
timeout 60 python3 scripts/lean_check.py compare /tmp/ref.pt 2>&1 | tail -2
ab v38 "25183,25183@TILES_HANDOFF=counters" 2
timeout 90 python3 -P -m pytest tests/test_cuda_kernel.py -q -p no:cacheprovider > "${OUT:-/tmp}/gputests-v38.log" 2>&1
grep -E "^(FAILED|ERROR)|passed|failed" "${OUT:-/tmp}/gputests-v38.log" | cut -c1-300
echo "=== done t=$(( $(date +%s) - AB_T0 ))"
