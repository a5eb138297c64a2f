#!/usr/bin/env bash
# One device call: build the CUDA extension, run the CUDA tests, kernel_check and the sanitizers, each phase
# bounded so the whole run ends within $BUDGET seconds (default 540). Logs in $OUT (or ./out), a summary on stdout.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 MAX_JOBS=${MAX_JOBS:-16} TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0a}
PY=${PYTHON:-python3}
T0=$(date +%s)
DEADLINE=$(( T0 + ${BUDGET:-540} ))

phase() {  # phase NAME CAP_SECONDS TAIL_LINES CMD...
  local name=$1 cap=$2 tl=$3
  shift 3
  local left=$(( DEADLINE - $(date +%s) ))
  local t=$(( cap < left ? cap : left ))
  if [ "$t" -le 10 ]; then echo "=== $name: SKIPPED (no time left)"; return 124; fi
  local s=$(date +%s)
  timeout "$t" "$@" >"$OUT/$name.log" 2>&1
  local rc=$?
  echo "=== $name: rc=$rc in $(( $(date +%s) - s )) s (cap $t s)"
  tail -n "$tl" "$OUT/$name.log"
  return $rc
}

nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
phase build 240 6 bash -c "$PY -m pip install --no-build-isolation --no-deps -q -e . && \
  o=\$(find build -name 'decode_kernel*.o' | head -1) && echo \"sass loads of \$o:\" && \
  cuobjdump -sass \"\$o\" | grep -o 'LDG[A-Z0-9._]*' | sort | uniq -c" || { echo "build failed"; exit 1; }
phase buffers 90 40 $PY -m pytest -q -s -p no:cacheprovider tests/test_cuda_buffers.py
phase kernel_check 170 30 $PY scripts/kernel_check.py --quick
phase kernel_tests 200 40 $PY -m pytest -q -rA -p no:cacheprovider --timeout 150 tests/test_cuda_kernel.py
SANITIZE_TIMEOUT=45 phase sanitize 100 8 bash scripts/sanitize.sh
echo "total $(( $(date +%s) - T0 )) s"
