# Sourced by the device-call A/B scripts (lean_ab.sh, session11_*.sh, ...): the GPU machine's build environment and
# the two steps they all repeat. Not a script of its own.
#   build TAG [VAR=value ...]   a fresh editable build of the extension with those build knobs (setup.py)
#   ab TAG [OPTS] [ROUNDS]      opt_ab of the option sets OPTS (default 25183) at Llama-1B ctx 32 / 4064 and
#                               SmolLM2 ctx 32, ROUNDS rounds (default 2), lines prefixed with TAG; its JSON is kept
#                               as $OUT/opt_ab-TAG.json
#   abx TAG                     opt_ab at long context too ($AB_MODELS; Llama-1B 32 / 4064 / 16000, SmolLM2 32)
#   ab_base_in / ab_new_in      swap the carried base kernel (.ab/cuda: a copy of csrc/cuda, the kernel and its
#                               parts) in, then the tree's back (scripts before session 28 carried one file)
#   keep_so TAG                 keeps the build's extension library as /tmp/so_TAG
#   build_pair TAG KNOB=v       main's build kept as base, then the knob's build kept as TAG (for swap_ab)
#   ab_once LABEL SO MODELS [MAX_CACHE]  one opt_ab round of kept library SO (the environment passes through)
#   swap_ab MODELS TAG ...      two rounds: each kept library in turn, opt_ab (one round, 16512 cache rows) on MODELS
#   build_patched TAG PATCH [VAR=value ...]  the tree with PATCH applied (patch -p1), built and kept as TAG; the
#                               patch is then taken out again
#   knob_ab TAG KNOB=v "POS" MODELS   a build knob against main's build: both built and kept, lean_check's bits at
#                               the positions POS (saved on base, compared on TAG), the kernel tests on TAG, swap_ab
#   patch_ab TAG PATCH "POS" MODELS   the same for a patch (docs/patches/) that keeps the bits
#   knob_acc TAG KNOB=v MODELS  the same for a knob that changes the bits: the kernel tests on TAG print their accuracy
#                               lines (CUDA vs the CPU reference, parity with Transformers), then swap_ab
#   attn_prof TAG CTX DEFINES   tile_timing.py of Llama-1B at CTX, 8 steps, a timing build with DEFINES; prints the
#                               last 12 ATTNPROF lines (TILES_ATTN_PROFILE), keeps its JSON and output in $OUT
#   sanitize_runs "OPT CACHE POS HANDOFF" ...  scripts/sanitize.sh (memcheck, racecheck) once per run, logs in $OUT
#   kernel_check_quick          main's build, then kernel_check.py --quick (every option set bit-identical, parity)
#   run_probe NAME [TIMEOUT]    scripts/NAME.cu compiled standalone for sm_90a and run (default 120 s)
#   ncu_src TAG CTX [SECTION ...]  ncu (default section SourceCounters: stalls, wavefronts per SASS row) of one decode
#                               launch of the current build at CTX, the 4th (ncu_attn.py): $OUT/ncu-TAG-CTX-sass.csv
#                               (for scripts/ncu_lines.py) and -details.csv
export PYTHONUNBUFFERED=1 CXX=/usr/bin/g++ CC=/usr/bin/gcc LDSHARED="/usr/bin/g++ -shared" MAX_JOBS=16 TORCH_CUDA_ARCH_LIST=9.0a
AB_T0=$(date +%s)
build() {
  local tag=$1
  shift
  rm -rf build tiles_ext/_C*.so
  env "$@" python3 -m pip install --no-build-isolation --no-deps -q -e . > /tmp/b.log 2>&1 || tail -30 /tmp/b.log
  echo "build $tag t=$(( $(date +%s) - AB_T0 ))"
}
ab() {
  timeout 150 python3 scripts/opt_ab.py --rounds "${3:-2}" --opts "${2:-25183}" \
    --models "llama-3.2-1b:32,4064;smollm2-135m:32" 2>&1 | grep -v Warning | grep "round\|rror" \
    | sed "s/^/$1 /; s/ P plan single 128 o-off 1 a0-off 1//"
  mv "${OUT:-/tmp}/opt_ab.json" "${OUT:-/tmp}/opt_ab-$1.json" 2>/dev/null || true
}
abx() {  # abx TAG: like ab, over $AB_MODELS (default Llama-1B ctx 32 / 4064 / 16000, SmolLM2 ctx 32), 16512 cache rows
  timeout "${AB_TIMEOUT:-200}" python3 scripts/opt_ab.py --rounds 2 --max-cache 16512 --opts 25183 \
    --models "${AB_MODELS:-llama-3.2-1b:32,4064,16000;smollm2-135m:32}" 2>&1 | grep -v Warning | grep "round\|rror" \
    | sed "s/^/$1 /; s/ P plan single 128 o-off 1 a0-off 1 mn 1//"
  mv "${OUT:-/tmp}/opt_ab.json" "${OUT:-/tmp}/opt_ab-$1.json" 2>/dev/null || true
}
ab_base_in() {
  [ -f .ab/cuda/decode_kernel.cu ] \
    || { echo "missing .ab/cuda (a copy of main's csrc/cuda; see the calling script's header)"; exit 2; }
  rm -rf /tmp/new_cuda && cp -r csrc/cuda /tmp/new_cuda
  rm -rf csrc/cuda && cp -r .ab/cuda csrc/cuda
}
ab_new_in() {
  rm -rf csrc/cuda && cp -r /tmp/new_cuda csrc/cuda
}
keep_so() { cp "$(ls tiles_ext/_C*.so)" "/tmp/so_$1"; }
build_pair() {  # build_pair TAG KNOB=value
  build base
  keep_so base
  build "$1" "$2"
  keep_so "$1"
}
ab_once() {  # ab_once LABEL SO MODELS [MAX_CACHE]: kept library SO in, one opt_ab round of the default option set
  cp "/tmp/so_$2" "$(ls tiles_ext/_C*.so)"
  timeout 100 python3 scripts/opt_ab.py --rounds 1 --max-cache "${4:-16512}" --opts 25183 --models "$3" 2>&1 \
    | grep -v Warning | grep "round\|rror" | sed "s/^/$1 /; s/ P plan single 128 o-off 1 a0-off 1 mn 1//"
}
swap_ab() {  # swap_ab MODELS TAG [TAG ...]: builds of one machine compared without a rebuild between rounds
  local models=$1 r v
  shift
  for r in 1 2; do
    for v in "$@"; do ab_once "$v r$r" "$v" "$models"; done
  done
}
attn_prof() {  # attn_prof TAG CTX DEFINES
  echo "=== $1: llama-3.2-1b ctx $2 defines '$3'"
  TILES_TIMING_DEFINES="$3" TILES_TIMING_BUILD=/tmp/tt timeout 150 python3 scripts/tile_timing.py \
    --model llama-3.2-1b --ctx "$2" --steps 8 --opts 25183 --json "${OUT:-/tmp}/tt-$1.json" > "/tmp/tt-$1.out" 2>&1
  grep "ATTNPROF" "/tmp/tt-$1.out" | tail -12
  cp "/tmp/tt-$1.out" "${OUT:-/tmp}/"
}
kernel_check_quick() {
  build main
  timeout 160 python3 scripts/kernel_check.py --quick --no-baseline 2>&1 | grep -v Warning | tail -25
  echo "kernel_check t=$(( $(date +%s) - AB_T0 ))"
}
run_probe() {  # run_probe NAME [TIMEOUT]
  nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a "scripts/$1.cu" -o "/tmp/$1" && timeout "${2:-120}" "/tmp/$1"
  echo "probe $1 t=$(( $(date +%s) - AB_T0 ))"
}
sanitize_runs() {  # sanitize_runs "OPT CACHE POS HANDOFF" ...
  local run
  for run in "$@"; do
    set -- $run
    echo "=== sanitize opt $1 cache $2 pos $3 handoff $4"
    TILES_KERNEL_OPT=$1 SANITIZE_CACHE=$2 SANITIZE_POS=$3 TILES_HANDOFF=$4 SANITIZE_TIMEOUT=80 \
      SANITIZE_LOGDIR="${OUT:-/tmp}" bash scripts/sanitize.sh
    echo "t=$(( $(date +%s) - AB_T0 ))"
  done
}
ncu_src() {  # ncu_src TAG CTX [SECTION ...] (default SourceCounters)
  local ctx=$2 rep="${OUT:-/tmp}/ncu-$1-$2" warm=3 sec=() s  # warm: launches before the profiled one
  shift 2
  for s in "${@:-SourceCounters}"; do sec+=(--section "$s"); done
  timeout 240 ncu --clock-control none -k regex:decode --launch-skip "$warm" --launch-count 1 "${sec[@]}" -f -o "$rep" \
    python3 scripts/ncu_attn.py --ctx "$ctx" --warm "$warm" 2>&1 | grep -v "^==PROF==" | tail -2
  ncu -i "$rep.ncu-rep" --page details --csv > "$rep-details.csv" 2>&1
  ncu -i "$rep.ncu-rep" --page source --csv --print-source sass > "$rep-sass.csv" 2>&1
  rm -f "$rep.ncu-rep"
}
build_patched() {  # build_patched TAG PATCH [VAR=value ...]
  local tag=$1 pf=$2
  shift 2
  patch -p1 -s < "$pf" || { echo "$pf does not apply"; return 1; }
  build "$tag" "$@"
  keep_so "$tag"
  patch -p1 -R -s < "$pf"
}
build_kept() { build "$@"; keep_so "$1"; }
# bits_ab TAG "POSITIONS" MODELS BUILD...: main's build as base (its bits saved at POSITIONS), then BUILD... (which
# builds and keeps TAG), its bits compared, the kernel tests on it, swap_ab.
bits_ab() {
  local tag=$1 positions=$2 models=$3 p
  shift 3
  build base
  keep_so base
  for p in $positions; do timeout 90 python3 scripts/lean_check.py save "/tmp/ref$p.pt" "$p" 2>&1 | tail -1; done
  "$@" || return 1
  for p in $positions; do timeout 90 python3 scripts/lean_check.py compare "/tmp/ref$p.pt" "$p" 2>&1 | tail -2; done
  timeout 200 python3 -m pytest -q -x tests/test_cuda_kernel.py 2>&1 | tail -3
  swap_ab "$models" base "$tag"
  echo "swap done t=$(( $(date +%s) - AB_T0 ))"
}
knob_ab() { bits_ab "$1" "$3" "$4" build_kept "$1" "$2"; }  # knob_ab TAG KNOB=value "POSITIONS" MODELS
patch_ab() { bits_ab "$1" "$3" "$4" build_patched "$1" "$2"; }  # patch_ab TAG PATCH "POSITIONS" MODELS
knob_acc() {  # knob_acc TAG KNOB=value MODELS
  local tag=$1 knob=$2 models=$3
  build_pair "$tag" "$knob"
  timeout 220 python3 -m pytest -q -s tests/test_cuda_kernel.py 2>&1 \
    | grep -E "cuda-vs-cpu|smollm2-135m:|llama-3.2-1b:|passed|failed|Error|assert" | tail -30 | sed "s/^/$tag /"
  swap_ab "$models" base "$tag"
  echo "swap done t=$(( $(date +%s) - AB_T0 ))"
}
