#!/bin/bash
# Session 28, call 2 (result: v66f KEPT, SmolLM2 -1.6% / -3.0%, commit 05f48c3; v68 REJECTED, Llama-1B +0.2 to
# +0.6%; perf log). Two patches that keep the bits, against main in one
# process (~490 s; session 27's call 1 did the same for three builds in 572 s):
# - v66f (docs/patches/v66f-flags-combine-outline.patch): session 27's v66 combine in the flag variant too, out of line
#   there (inlined it spilled 20-24 B). Only SmolLM2 runs it; Llama-1B's counter variant keeps main's SASS.
#   Prediction: SmolLM2 -0.5 to -1% at 4064 (v66 gave Llama-1B -1.0% there), level at 32.
# - v68 (docs/patches/v68-attn-o-swizzle.patch): the tensor-core path's o slots XOR-swizzled by head, so the
#   combine's 16 o loads per thread are conflict-free (4 wavefronts each on main), in both variants.
#   Prediction: ~-0.2 us per ATTN tile on the critical chain: Llama-1B -0.3 to -0.5% at every context, SmolLM2 -0.2%.
# lean_check's bits at 40 / 3000 / 16000 saved on main and compared on each; the kernel tests on each; then two swap
# rounds over Llama-1B 32 / 4064 / 16000 and SmolLM2 32 / 4064.
cd "$(dirname "$0")/.." || exit 1
exec > >(tee "${OUT:-/tmp}/call2.log") 2>&1
source scripts/ab_common.sh
pos="40 3000 16000"
build_kept base
for p in $pos; do timeout 90 python3 scripts/lean_check.py save "/tmp/ref$p.pt" "$p" 2>&1 | tail -1; done
for t in v66f:docs/patches/v66f-flags-combine-outline.patch v68:docs/patches/v68-attn-o-swizzle.patch; do
  build_patched "${t%%:*}" "${t#*:}" || exit 1
  for p in $pos; do timeout 90 python3 scripts/lean_check.py compare "/tmp/ref$p.pt" "$p" 2>&1 | tail -2 \
    | sed "s/^/${t%%:*} $p /"; done
  timeout 150 python3 -m pytest -q -x tests/test_cuda_kernel.py 2>&1 | tail -1 | sed "s/^/${t%%:*} /"
done
echo "tests t=$(( $(date +%s) - AB_T0 ))"
swap_ab "llama-3.2-1b:32,4064,16000;smollm2-135m:32,4064" base v66f v68
echo "total t=$(( $(date +%s) - AB_T0 ))"
