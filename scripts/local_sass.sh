#!/bin/bash
# The decode kernel's SASS on this machine (no GPU needed): compiles the default and the flag variant for sm_90a with
# the extension's device flags (-O3 -lineinfo; extra -D knobs as arguments), prints ptxas' registers / stack / spills
# and an md5 of each variant's SASS (a knob that is off must leave main's md5), and writes nvdisasm -g -c listings
# (/tmp/sass_TAG_{default,flags}.txt) for scripts/ncu_lines.py. cuobjdump and nvdisasm are not in this machine's
# CUDA install: the script takes them from the nvidia-cuda-cuobjdump / nvidia-cuda-nvdisasm wheels (pip download,
# unpacked once into /tmp/cuobj).
# Usage: bash scripts/local_sass.sh TAG [-DKNOB=value ...]
set -e
tag=$1
shift
cd "$(dirname "$0")/.."
bin=/tmp/cuobj/x/nvidia/cu13/bin
if [ ! -x "$bin/nvdisasm" ]; then
  mkdir -p /tmp/cuobj
  (cd /tmp/cuobj && python3 -m pip download -q --no-deps nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm \
    && for w in *.whl; do python3 -m zipfile -e "$w" x; done && chmod +x x/nvidia/cu13/bin/*)
fi
export PATH=$bin:$PATH
for v in default flags; do
  out=/tmp/sass_${tag}_$v
  nvcc -std=c++17 --expt-relaxed-constexpr -lineinfo -O3 -gencode=arch=compute_90a,code=sm_90a -DTILES_WITH_CUDA=1 \
    -I csrc -I csrc/generated "$@" -Xptxas -v -cubin -o "$out.cubin" "csrc/cuda/decode_kernel_$v.cu" 2> "$out.ptxas"
  grep -A2 "Function properties for _ZN5tiles4cuda13decode_kernel" "$out.ptxas" | grep -E "registers|spill" | head -2 \
    | sed "s/^/$tag $v: /"
  echo "$tag $v SASS md5 $(cuobjdump -sass "$out.cubin" | sed -E 's@/\* 0x[0-9a-f]+ \*/@@' | grep -v '^\s*$' | md5sum \
    | cut -c1-8)"
  nvdisasm -g -c "$out.cubin" > "$out.txt"
done
