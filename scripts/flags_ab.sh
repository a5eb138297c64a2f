#!/usr/bin/env bash
# One device call (~5 min), run from the repository root on the GPU machine: the counter build (the default, bits
# saved, opt_ab), then the flag build (TILES_FLAGS=1: bits compared, the GPU suite, opt_ab). Perf log v28, v29.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export PYTHONUNBUFFERED=1 CXX=/usr/bin/g++ CC=/usr/bin/gcc LDSHARED="/usr/bin/g++ -shared" MAX_JOBS=16 TORCH_CUDA_ARCH_LIST=9.0a
t0=$(date +%s)
build() {  # TILES_FLAGS value
  rm -rf build tiles_ext/_C*.so
  TILES_FLAGS=$1 python3 -m pip install --no-build-isolation --no-deps -q -e . > /tmp/b.log 2>&1 || tail -30 /tmp/b.log
  echo "build TILES_FLAGS=$1 t=$(( $(date +%s) - t0 ))"
}
ab() {  # tag
  timeout 120 python3 scripts/opt_ab.py --rounds 2 --opts 25183 --models "llama-3.2-1b:32,4064;smollm2-135m:32" 2>&1 \
    | grep -v Warning | grep "round\|rror" | sed "s/^/$1 /; s/ P plan single 128 o-off 1 a0-off 1//"
}
build 0
timeout 60 python3 scripts/lean_check.py save /tmp/ref.pt 2>&1 | tail -1
ab counters
build 1
timeout 90 python3 scripts/lean_check.py compare /tmp/ref.pt 2>&1 | tail -2
timeout 200 python3 -P -m pytest tests -q -rfs -k "cuda or gpu" -p no:cacheprovider 2>&1 \
  | grep -E "^(FAILED|ERROR)|passed|failed" | cut -c1-300 | tee ${OUT:-/tmp}/gputests-flags.log
ab flags
echo "=== done t=$(( $(date +%s) - t0 ))"
