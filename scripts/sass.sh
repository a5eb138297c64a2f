#!/bin/bash
# The decode kernels' SASS on this machine (no GPU needed): compiles every kernel (decode_kernel_*.cu: counters and
# flags x the attention's head_dims, each with and without the sampler; the FP8 and the rows kernels) for sm_90a with the extension's device flags
# (-O3 -lineinfo; extra -D flags as arguments), prints ptxas' registers / stack / spills and two md5s of each
# kernel's SASS: raw (encodings dropped), and normalised (also constant-bank offsets and symbol names, so a change of
# KernelParams' layout or of a file name leaves it). Writes /tmp/sass_TAG_<kernel>.norm (the normalised listing: diff
# two tags' files to see what changed) and .txt (nvdisasm -g -c, with source lines).
# cuobjdump / nvdisasm: from PATH, /opt/cudatools or /tmp/cuobj (the nvidia-cuda-cuobjdump / -nvdisasm wheels,
# downloaded and unpacked there once when neither has them).
# Usage: bash scripts/sass.sh TAG [-DMACRO=value ...]
set -e
tag=$1
shift
cd "$(dirname "$0")/.."
if ! command -v nvdisasm >/dev/null; then
  for bin in /opt/cudatools /opt/cudatools/bin /tmp/cuobj/x/nvidia/cu13/bin; do
    [ -x "$bin/nvdisasm" ] && export PATH=$bin:$PATH && break
  done
fi
if ! command -v nvdisasm >/dev/null; then
  mkdir -p /tmp/cuobj
  (cd /tmp/cuobj && python3 -m pip download -q --no-deps nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm \
    && for w in *.whl; do python3 -m zipfile -e "$w" x; done && chmod +x x/nvidia/cu13/bin/*)
  export PATH=/tmp/cuobj/x/nvidia/cu13/bin:$PATH
fi
# Encodings and addresses out; constant-bank offsets and symbol names (kernel name, file-hashed internal names) as
# placeholders.
normalise() {
  sed -E 's@/\* 0x[0-9a-f]+ \*/@@; s@/\*[0-9a-f]+\*/@@; s@c\[0x0\]\[0x[0-9a-f]+\]@c[0x0][OFF]@g;
          s@Function : .*@Function : KERNEL@; s@_INTERNAL_[0-9a-f]+_[0-9]+_[A-Za-z0-9_]+_cu_[0-9a-f]+@INTERNAL@g;
          s@_GLOBAL__N__[0-9a-f]+_[0-9]+_[A-Za-z0-9_]+_cu_[0-9a-f]+@ANON@g' | grep -v '^\s*$'
}
for v in $(ls csrc/cuda/decode_kernel_*.cu | sed -E 's@.*/decode_kernel_(.*)\.cu@\1@' | sort -V); do
  out=/tmp/sass_${tag}_$v
  nvcc -std=c++17 --expt-relaxed-constexpr -lineinfo -O3 -gencode=arch=compute_90a,code=sm_90a -DTILE_WITH_CUDA=1 \
    -I csrc -I csrc/generated "$@" -Xptxas -v -cubin -o "$out.cubin" "csrc/cuda/decode_kernel_$v.cu" 2> "$out.ptxas"
  grep -E -A2 "Function properties for _ZN5tiles4cuda(13decode_kernel|18decode_rows_kernel)" "$out.ptxas" | grep -E "registers|spill" | head -2 \
    | sed "s/^/$tag $v: /"
  cuobjdump -sass "$out.cubin" | normalise > "$out.norm"
  echo "$tag $v SASS md5 $(cuobjdump -sass "$out.cubin" | sed -E 's@/\* 0x[0-9a-f]+ \*/@@' | grep -v '^\s*$' | md5sum \
    | cut -c1-8), normalised $(md5sum < "$out.norm" | cut -c1-8)"
  nvdisasm -g -c "$out.cubin" > "$out.txt"
done
