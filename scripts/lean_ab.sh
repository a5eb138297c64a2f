#!/usr/bin/env bash
# The codegen tax (docs/perf-log.md v26), one device call (~5-6 min): run from the repository root on the GPU machine.
# Normal build -> lean build (TILES_LEAN_OPT=25183: every non-default option compiled out) -> normal build again;
# opt_ab of 25183 in each, and the lean build's bits against the normal build's; then the PollPrefetch
# instantiation's experiments against its own baseline. Leaves the normal build installed.
# Since v27 (decode_kernel_default.cu) a normal build runs 25183 on the default variant, which is what the lean
# build measured; append @TILES_GENERIC_KERNEL=1 to an opt_ab entry for the runtime-options kernel.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/ab_common.sh
build normal
timeout 90 python3 scripts/lean_check.py save /tmp/ref.pt 2>&1 | tail -1
ab normal 25183 1
build lean TILES_LEAN_OPT=25183
timeout 90 python3 scripts/lean_check.py compare /tmp/ref.pt 2>&1 | tail -2
ab lean 25183 1
build normal
# The PollPrefetch instantiation's experiments against its own baseline (nothing enabled): v12 PollPrefetch (4096),
# v16 PrefetchAfterAttn (32768), v26 PollAhead (131072).
ab normal2 "25183,29279@TILES_POLL_PREFETCH_CAP=0,29279,57951,156255" 1
echo "t=$(( $(date +%s) - AB_T0 ))"
