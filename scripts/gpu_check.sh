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
# The image's default compiler (/opt/gcc/bin/g++, Python's sysconfig) linked libstdc++ statically into the
# extension (seen 2026-11-30: every c10::str crashed in a locale facet of the private copy). Use the system g++.
for c in /usr/bin/g++ /usr/bin/g++-13 /usr/bin/g++-14 /usr/bin/g++-12; do
  if [ -x "$c" ]; then export CXX=$c CC=${c/g++/gcc} LDSHARED="$c -shared"; break; fi
done
echo "compiler: ${CXX:-default} ($(${CXX:-g++} --version | head -1))"
static_stdcxx() { nm tiles_ext/_C*.so 2>/dev/null | grep -q read_utf8_code_point; }
phase build 200 8 bash -c "$PY -m pip install --no-build-isolation --no-deps -q -e . && \
  o=\$(find build -name 'decode_kernel*.o' | head -1) && echo \"sass loads of \$o:\" && \
  cuobjdump -sass \"\$o\" | grep -oE 'LDG[A-Z0-9._]*|UBLKCP[A-Z0-9._]*|SYNCS[A-Z0-9._]*' | sort | uniq -c; ldd tiles_ext/_C*.so | grep stdc" \
  || { echo "build failed"; exit 1; }
if static_stdcxx; then
  echo "libstdc++ is linked statically into the extension: relinking against the shared libstdc++"
  export LDSHARED="${CXX:-g++} -shared -nodefaultlibs -Wl,-Bdynamic -lstdc++ -lm -lc -lgcc_s -lgcc"
  rm -f tiles_ext/_C*.so
  phase relink 120 4 $PY -m pip install --no-build-isolation --no-deps -q -e .
  static_stdcxx && echo "STILL static: expect crashes in error messages"
fi
export KC_DEADLINE=$(( DEADLINE - 45 ))
phase buffers 40 6 $PY -m pytest -q -s -p no:cacheprovider tests/test_cuda_buffers.py
# Timing first (what this call is for), then the tests; KC_ARGS / KT_K (pytest -k) / SAN_OPT narrow or widen them.
phase kernel_check ${KC_CAP:-200} 60 $PY scripts/kernel_check.py --quick ${KC_ARGS:---no-baseline}
# KT_OPT: the option set every test without its own runs under (the bit-identity test sets its own).
phase kernel_tests ${KT_CAP:-130} 30 env ${KT_OPT:+TILES_KERNEL_OPT=$KT_OPT} $PY -m pytest -q -rfE -p no:cacheprovider --timeout 60 \
  tests/test_cuda_kernel.py -k "${KT_K:-not full_size and not torch_compile}"
# The sanitizers run the option set named by SAN_OPT (default: every option on, the most code).
TILES_KERNEL_OPT=${SAN_OPT:-127} SANITIZE_TIMEOUT=25 phase sanitize 55 8 bash scripts/sanitize.sh
# Optional: per-tile timing (scripts/tile_timing.py), last because it only explains.
[ -n "${TIMING_CMD:-}" ] && phase tile_timing ${TT_CAP:-60} 45 bash -c "$TIMING_CMD"
echo "total $(( $(date +%s) - T0 )) s"
