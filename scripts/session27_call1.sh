#!/bin/bash
# Session 27, call 1 (result: both kept in bf43094: 32 +0.3%, 4064 -1.0%, 16000 -2.5%; perf log). It ran on 8febee4
# with the two patches, since deleted (in main now): `git show bf43094:docs/patches/v66-combine-unrolled.patch`,
# `git show 8febee4:docs/patches/v65-tc-o-regs.patch`.
# Two patches that keep the bits, against main in one process: v66 (docs/patches/v66-combine-unrolled.patch: the
# ATTN tile's combine of the warps' states unrolled over the 16 warps, branch-free, counter variant), v65
# (docs/patches/v65-tc-o-regs.patch: each warp's o in registers across the chunk loop) and both. lean_check's bits
# at positions 40 / 3000 / 16000 saved on main and compared on each; the kernel tests on both; two swap rounds over
# Llama-1B 32 / 4064 / 16000 and SmolLM2 32 (its flag variant is main's in every build: the noise control).
cd "$(dirname "$0")/.." || exit 1
exec > >(tee "${OUT:-/tmp}/call1.log") 2>&1
source scripts/ab_common.sh
pos="40 3000 16000"
build base
keep_so base
for p in $pos; do timeout 90 python3 scripts/lean_check.py save "/tmp/ref$p.pt" "$p" 2>&1 | tail -1; done
patch -p1 -s < docs/patches/v66-combine-unrolled.patch
patch -p1 -s < docs/patches/v65-tc-o-regs.patch
git diff csrc > /tmp/both.patch
git checkout -q csrc
for t in cmb:docs/patches/v66-combine-unrolled.patch o65:docs/patches/v65-tc-o-regs.patch both:/tmp/both.patch; do
  build_patched "${t%%:*}" "${t#*:}" || exit 1
  for p in $pos; do timeout 90 python3 scripts/lean_check.py compare "/tmp/ref$p.pt" "$p" 2>&1 | tail -2 \
    | sed "s/^/${t%%:*} /"; done
done
cp /tmp/so_both "$(ls tiles_ext/_C*.so)"
timeout 150 python3 -m pytest -q -x tests/test_cuda_kernel.py 2>&1 | tail -3 | sed "s/^/both /"
echo "tests t=$(( $(date +%s) - AB_T0 ))"
swap_ab "llama-3.2-1b:32,4064,16000;smollm2-135m:32" base cmb o65 both
echo "total t=$(( $(date +%s) - AB_T0 ))"
