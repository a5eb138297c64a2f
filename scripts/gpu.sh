#!/usr/bin/env bash
# One GPU session in one command (< 10 minutes): GPU info, build (CUDA extension, sm_90a), the GPU tests, the
# benchmark (python -m tiles_ext.bench --gpu, which writes docs/results/ and README.md's results block), and on
# request the sanitizer (scripts/sanitize.sh) and the kernel check (scripts/kernel_check.py) after the tests.
# Each phase runs even if an earlier one failed (where it can); the exit status is non-zero if any failed, and a
# summary table ends the log. Logs and results are copied to $OUT when it is set (the device tool returns it).
#
# Usage: bash scripts/gpu.sh [--test-timeout S] [--total-budget S] [--bench-budget S] [--pytest-args "..."]
#                            [--bench-args "..."] [--no-bench] [--sanitize] [--sanitize-args "..."]
#                            [--kernel-check] [--kernel-check-args "..."]
#   --test-timeout       the GPU tests' bound (s, default 200)
#   --total-budget       the whole call's target (s, default 500); the benchmark gets what is left, at least 120 s
#   --bench-budget       the benchmark's budget (s), instead of what is left
#   --pytest-args        extra pytest arguments (e.g. "-k parity"); --bench-args: extra bench arguments
#   --no-bench           skip the benchmark
#   --sanitize           run scripts/sanitize.sh after the tests (--sanitize-args: its arguments)
#   --kernel-check       run scripts/kernel_check.py after the tests (--kernel-check-args: its arguments)
set -uo pipefail
TEST_TIMEOUT=200 TOTAL_BUDGET=500 BENCH_BUDGET="" PYTEST_ARGS="" BENCH_ARGS="" RUN_BENCH=1
SANITIZE="" SANITIZE_ARGS="" KERNEL_CHECK="" KERNEL_CHECK_ARGS=""
while [ $# -gt 0 ]; do
    case "$1" in
        --test-timeout) TEST_TIMEOUT=$2; shift 2 ;;
        --total-budget) TOTAL_BUDGET=$2; shift 2 ;;
        --bench-budget) BENCH_BUDGET=$2; shift 2 ;;
        --pytest-args) PYTEST_ARGS=$2; shift 2 ;;
        --bench-args) BENCH_ARGS=$2; shift 2 ;;
        --no-bench) RUN_BENCH=0; shift ;;
        --sanitize) SANITIZE=1; shift ;;
        --sanitize-args) SANITIZE_ARGS=$2; shift 2 ;;
        --kernel-check) KERNEL_CHECK=1; shift ;;
        --kernel-check-args) KERNEL_CHECK_ARGS=$2; shift 2 ;;
        -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
        *) echo "[gpu] unknown argument: $1 (see --help)"; exit 2 ;;
    esac
done
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export PYTHONUNBUFFERED=1
T_START=$(date +%s)
OUTDIR="${OUT:-build/gpu-run}"
mkdir -p "$OUTDIR" build
LOG="$OUTDIR/gpu.log"
exec > >(tee "$LOG") 2>&1
TEE_PID=$!
touch build/.gpu-run-start

PHASES=(); RCS=(); SECS=(); NOTES=()
phase() {  # phase NAME COMMAND...: runs it, records exit status and seconds
    local name=$1; shift
    echo; echo "=================== $name ($(date -u +%H:%M:%S) UTC, +$(( $(date +%s) - T_START )) s) ==================="
    local t0; t0=$(date +%s)
    "$@"; local rc=$?
    PHASES+=("$name"); RCS+=("$rc"); SECS+=("$(( $(date +%s) - t0 ))")
    [ "$rc" = 0 ] || echo "[gpu] phase '$name' FAILED (exit $rc)"
    return 0
}
skip_phase() { PHASES+=("$1"); RCS+=("skip"); SECS+=(0); echo "[gpu] phase '$1' skipped: $2"; }

gpu_info() {
    nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm,clocks.max.mem --format=csv || true
    command -v nvcc >/dev/null && nvcc --version | tail -2
    python3 - <<'EOF'
import platform, torch
print(f"python {platform.python_version()}  torch {torch.__version__}  CUDA {torch.version.cuda}")
try:
    import transformers
    print(f"transformers {transformers.__version__}")
except ImportError as e:
    print(f"transformers missing: {e}")
assert torch.cuda.is_available(), "torch sees no CUDA device"
p = torch.cuda.get_device_properties(0)
print(f"GPU 0: {p.name}, sm_{p.major}{p.minor}, {p.multi_processor_count} SMs, {p.total_memory / 2**30:.0f} GiB, "
      f"L2 {getattr(p, 'L2_cache_size', 0) / 2**20:.0f} MiB")
EOF
}

build() {
    # setup.sh: on a CUDA machine it keeps the image's torch and builds (pip install --no-build-isolation --no-deps -e .)
    source scripts/setup.sh || return 1
    "$PY" -c "import torch; assert torch.cuda.is_available()" 2>/dev/null || { echo "[gpu] torch sees no CUDA device"; return 1; }
    # A private static libstdc++ in the extension crashes every error message (setup.py _use_system_compiler).
    if nm tiles_ext/_C*.so 2>/dev/null | grep -q read_utf8_code_point; then
        echo "[gpu] tiles_ext/_C links libstdc++ statically (compiler: $(grep -om1 '[^ ]*g++' build/build.log))"
        return 1
    fi
    (cd / && "$PY" -c "import torch, tiles_ext; assert torch._C._dispatch_has_kernel_for_dispatch_key(
        'tiles::decode_step', 'CUDA'), 'tiles_ext._C has no CUDA kernel'; print('[gpu] tiles_ext loads, CUDA kernel registered')")
}

gpu_tests() {
    # -k also matches marker names, so this selects tests named *cuda*/*gpu* and tests marked gpu.
    # shellcheck disable=SC2086
    timeout -k 10 "$TEST_TIMEOUT" "$PY" -P -m pytest tests -q -rs --durations=15 \
        -k "cuda or gpu" --junitxml="$OUTDIR/gpu-tests.xml" $PYTEST_ARGS
}

sanitize() {
    # shellcheck disable=SC2086
    bash scripts/sanitize.sh --python "$PY" --logdir "$OUTDIR" $SANITIZE_ARGS
}

kernel_check() {
    # shellcheck disable=SC2086
    "$PY" -P scripts/kernel_check.py --json "$OUTDIR/kernel_check.json" $KERNEL_CHECK_ARGS
}

bench() {
    local left=$(( TOTAL_BUDGET - ($(date +%s) - T_START) ))
    local budget=${BENCH_BUDGET:-$(( left > 120 ? left : 120 ))}
    echo "[gpu] bench budget ${budget} s"
    # shellcheck disable=SC2086
    timeout -k 10 $(( budget + 45 )) "$PY" -P -m tiles_ext.bench --gpu --budget-s "$budget" $BENCH_ARGS
}

# ---------------------------------------------------------------------------------------------------------------
if ! python3 -c "import torch; assert torch.cuda.is_available()" >/dev/null 2>&1; then
    echo "[gpu] this machine's python3 has no CUDA torch: scripts/gpu.sh is for the GPU machine (use scripts/test.sh)"
    exit 1
fi
phase "gpu info" gpu_info
phase "build" build
BUILD_RC=${RCS[-1]}
if [ "$BUILD_RC" = 0 ]; then
    phase "gpu tests" gpu_tests
    [ -n "$SANITIZE" ] && phase "sanitize" sanitize
    [ -n "$KERNEL_CHECK" ] && phase "kernel check" kernel_check
    if [ "$RUN_BENCH" = 0 ]; then
        skip_phase "bench" "--no-bench"
    elif "$PY" -c "import importlib.util as u, sys; sys.exit(0 if u.find_spec('tiles_ext.bench') else 1)" 2>/dev/null; then
        phase "bench" bench
    else
        skip_phase "bench" "tiles_ext.bench not found"
    fi
else
    skip_phase "gpu tests" "build failed"
    [ -n "$SANITIZE" ] && skip_phase "sanitize" "build failed"
    [ -n "$KERNEL_CHECK" ] && skip_phase "kernel check" "build failed"
    skip_phase "bench" "build failed"
fi

# Results and logs back through $OUT (the device tool returns at most 8 files, 2 folders deep).
cp build/build.log "$OUTDIR/build.log" 2>/dev/null
RESULTS=$(find docs/results -type f -newer build/.gpu-run-start 2>/dev/null | sort)
if [ -n "$RESULTS" ]; then
    mkdir -p "$OUTDIR/results"
    echo "$RESULTS" | head -5 | while read -r f; do cp "$f" "$OUTDIR/results/"; done
    echo "[gpu] new results: $(echo "$RESULTS" | tr '\n' ' ')"
fi

echo; echo "=================== summary (total $(( $(date +%s) - T_START )) s) ==================="
printf "%-12s %-8s %6s\n" phase status seconds
FAILED=0
for i in "${!PHASES[@]}"; do
    st=${RCS[$i]}
    case "$st" in 0) s=ok ;; skip) s=skipped ;; *) s="FAIL($st)"; FAILED=1 ;; esac
    printf "%-12s %-8s %6s\n" "${PHASES[$i]}" "$s" "${SECS[$i]}"
done
grep -h '\[tiles\] extension build took' build/build.log 2>/dev/null | tail -1 | sed 's/^\s*/build: /'
# Let tee finish writing the log before the tool collects $OUT.
exec 1>&- 2>&-
wait "$TEE_PID" 2>/dev/null
exit $FAILED
