#!/usr/bin/env bash
# Device debugging aid: build, then run scripts/op_smoke.py under cuda-gdb (host backtrace on a crash) for the CPU
# and the CUDA op. Logs in $OUT.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 MAX_JOBS=${MAX_JOBS:-16} TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0a}
s=$(date +%s)
timeout 200 python3 -m pip install --no-build-isolation --no-deps -v -e . >"$OUT/build.log" 2>&1
echo "build rc=$? in $(( $(date +%s) - s )) s"; grep -E "c\+\+|std=" "$OUT/build.log" | grep -o -- "-std=[^ ]*" | sort | uniq -c
for d in cpu cuda; do
  timeout 90 python3 scripts/op_smoke.py $d >"$OUT/smoke-$d.log" 2>&1; echo "smoke $d rc=$?"; tail -3 "$OUT/smoke-$d.log"
  timeout 120 cuda-gdb -q -batch -ex "set pagination off" -ex run -ex bt -ex "info registers rip" \
    --args python3 scripts/op_smoke.py $d >"$OUT/gdb-$d.log" 2>&1
  grep -E "^#|SIGSEGV|signal|tokens" "$OUT/gdb-$d.log" | head -40
done
echo "total $(( $(date +%s) - s )) s"
