"""The install works: the op library registers its kernels, the package names resolve, and the CUDA sources
compile for sm_90a even on a machine without a GPU (so a syntax error in GPU code fails CI)."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
import torch

import tiles_ext

REPO = Path(__file__).resolve().parent.parent
CUDA_DIR = REPO / "csrc" / "cuda"
OP = "tiles::decode_step"
SCHEMA = ("tiles::decode_step(Tensor plan, int[] plan_header, Tensor[] weights, Tensor(a!)[] k_cache, "
          "Tensor(b!)[] v_cache, Tensor(c!) scratch, Tensor(d!) state, Tensor input_ids, Tensor position, "
          "Tensor rope_inv_freq, float rope_scale, int num_steps, int[] eos_ids, int order_seed=0, "
          "Tensor(e!)? sampler=None) -> (Tensor logits, Tensor tokens)")
# Same device flags as setup.py's NVCC_COMMON + the default arch (keep the two in step).
NVCC_FLAGS = ["-std=c++17", "--expt-relaxed-constexpr", "-lineinfo",
              "-U__CUDA_NO_HALF_OPERATORS__", "-U__CUDA_NO_HALF_CONVERSIONS__",
              "-U__CUDA_NO_HALF2_OPERATORS__", "-U__CUDA_NO_BFLOAT16_CONVERSIONS__",
              "-U__CUDA_NO_BFLOAT16_OPERATORS__", "-gencode=arch=compute_90a,code=sm_90a"]
TORCH_INCLUDE = re.compile(r'^\s*#\s*include\s*[<"](torch|ATen|c10)/', re.M)


def test_op_registered_with_cpu_and_fake_kernels():
    assert hasattr(torch.ops.tiles, "decode_step"), "import tiles_ext did not register torch.ops.tiles.decode_step"
    assert torch._C._dispatch_has_kernel_for_dispatch_key(OP, "CPU"), "no CPU kernel (reference executor)"
    # register_fake installs a Meta kernel: what torch.compile and FakeTensor tracing call.
    assert torch._C._dispatch_has_kernel_for_dispatch_key(OP, "Meta"), "no fake kernel (tiles_ext/ops.py)"


def test_op_schema_is_the_documented_one():
    assert str(torch.ops.tiles.decode_step.default._schema) == SCHEMA


@pytest.mark.gpu
def test_cuda_kernel_registered():
    assert torch._C._dispatch_has_kernel_for_dispatch_key(OP, "CUDA"), (
        "torch sees CUDA but tiles_ext._C has no CUDA kernel: it was built as a CppExtension "
        "(rebuild with a CUDA toolkit present: TILES_REBUILD=1 bash scripts/test.sh)")


def test_package_names_from_another_directory(tmp_path):
    """planner/ and integrations/ are installed as tiles_ext.planner / tiles_ext.integrations only: no top-level
    `planner` that could load the same module twice under two names. Checked from a directory outside the repo."""
    code = (
        "import importlib.util as u, tiles_ext, tiles_ext.planner as p, tiles_ext.integrations as i\n"
        "from tiles_ext.planner import format as f\n"
        "assert u.find_spec('planner') is None, 'top-level planner importable'\n"
        "assert u.find_spec('integrations') is None, 'top-level integrations importable'\n"
        "assert callable(tiles_ext.patch) and callable(tiles_ext.unpatch)\n"
        "print(p.__file__); print(i.__file__); print(f.__name__); print(tiles_ext.__version__)\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run([sys.executable, "-P", "-c", code], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    planner_file, integrations_file, format_name, version = out.stdout.split()
    assert Path(planner_file).parent.name == "planner" and Path(integrations_file).parent.name == "integrations"
    assert format_name == "tiles_ext.planner.format"
    assert version == tiles_ext.__version__


def test_shipped_configs_are_found():
    from tiles_ext.models import available_configs, config_path
    assert {"llama-3.2-1b", "smollm2-135m"} <= set(available_configs())
    assert config_path("llama-3.2-1b").is_file()


def test_import_without_compiled_library_says_how_to_build(tmp_path):
    """A checkout that was never built fails on import with the build command, not an obscure loader error."""
    # Another package name: the editable install would otherwise find the real _C for any `tiles_ext`.
    pkg = tmp_path / "tiles_unbuilt"
    pkg.mkdir()
    shutil.copy(REPO / "tiles_ext" / "__init__.py", pkg / "__init__.py")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run([sys.executable, "-c", "import tiles_unbuilt"], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode != 0
    assert "ImportError" in out.stderr and "pip install --no-build-isolation -e ." in out.stderr, out.stderr[-2000:]


# --------------------------------------------------------------------------- CUDA sources on a CPU-only machine


def _nvcc() -> str | None:
    found = shutil.which("nvcc")
    if found:
        return found
    for home in (os.environ.get("CUDA_HOME"), "/usr/local/cuda"):
        if home and (Path(home) / "bin" / "nvcc").is_file():
            return str(Path(home) / "bin" / "nvcc")
    return None


def _cuda_include() -> Path | None:
    """The toolkit's include folder (nvcc on PATH may be a wrapper script elsewhere)."""
    from torch.utils.cpp_extension import CUDA_HOME
    nvcc = _nvcc()
    candidates = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), CUDA_HOME, "/usr/local/cuda"]
    if nvcc:
        candidates.append(str(Path(nvcc).resolve().parent.parent))
    for home in candidates:
        if home and (Path(home) / "include" / "cuda_runtime_api.h").is_file():
            return Path(home) / "include"
    return None


def _kernel_sources() -> list[Path]:
    return sorted(p for p in CUDA_DIR.glob("*.cu") if not TORCH_INCLUDE.search(p.read_text()))


def test_cuda_sources_exist():
    # The kernel sources must not depend on torch headers (they are compiled standalone below and in CI).
    cu = sorted(CUDA_DIR.glob("*.cu"))
    assert cu, "no csrc/cuda/*.cu: the CUDA kernel is missing"
    with_torch = [p.name for p in cu if TORCH_INCLUDE.search(p.read_text())]
    assert not with_torch, f"{with_torch} include torch headers: keep torch in the csrc/cuda/*.cpp glue"


@pytest.mark.parametrize("source", _kernel_sources(), ids=lambda p: p.name)
def test_nvcc_compiles_kernel_for_sm90a(source, tmp_path):
    if torch.cuda.is_available():
        pytest.skip("the CUDA extension build on this machine compiled it already")
    nvcc = _nvcc()
    if nvcc is None:
        pytest.skip("nvcc not found (PATH, $CUDA_HOME, /usr/local/cuda): CUDA sources not compiled")
    cmd = [nvcc, *NVCC_FLAGS, "-O3", f"-I{REPO / 'csrc'}", f"-I{REPO / 'csrc' / 'generated'}",
           "-c", str(source), "-o", str(tmp_path / (source.stem + ".o"))]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, f"{' '.join(cmd)}\n{out.stdout[-3000:]}\n{out.stderr[-6000:]}"


# The measurement tools' device code (scripts/tile_timing.py and scripts/latency_probe.py build it with nvcc on the
# GPU machine): compiled here too, so that a kernel change that breaks the timing build fails CI, not a device call.
TOOL_BUILDS = {
    "tile_timing_kernel": (CUDA_DIR / "decode_kernel.cu", ["-DTILES_TILE_TIMING=1"]),
    "tile_timing_launch": (REPO / "scripts" / "tile_timing_launch.cu", ["-DTILES_TILE_TIMING=1"]),
    "latency_probe": (REPO / "scripts" / "latency_probe.cu", []),
    "stream_probe": (REPO / "scripts" / "stream_probe.cu", []),
    "kv_probe": (REPO / "scripts" / "kv_probe.cu", []),
    "bcast_probe": (REPO / "scripts" / "bcast_probe.cu", []),
    "boundary_probe": (REPO / "scripts" / "boundary_probe.cu", []),
    "poll_probe": (REPO / "scripts" / "poll_probe.cu", []),
    "reduce_probe": (REPO / "scripts" / "reduce_probe.cu", []),
    "notify_probe": (REPO / "scripts" / "notify_probe.cu", []),
    "smem_probe": (REPO / "scripts" / "smem_probe.cu", []),
    # Experiment builds: the split main-phase mark (tile_timing.py TILES_TIMING_DEFINES) and the kernel with its
    # options fixed at compile time (setup.py TILES_LEAN_OPT, scripts/lean_ab.sh).
    "tile_timing_mark_split": (CUDA_DIR / "decode_kernel.cu", ["-DTILES_TILE_TIMING=1", "-DTILES_MARK_SPLIT"]),
    "tile_timing_mark_split4": (CUDA_DIR / "decode_kernel_default.cu", ["-DTILES_TILE_TIMING=1",
                                                                       "-DTILES_MARK_SPLIT=4"]),
    "decode_kernel_lean_25183": (CUDA_DIR / "decode_kernel.cu", ["-DTILES_LEAN_OPT=25183"]),
    "tile_timing_default": (CUDA_DIR / "decode_kernel_default.cu", ["-DTILES_TILE_TIMING=1"]),
    "tile_timing_attn_split2": (CUDA_DIR / "decode_kernel_default.cu", ["-DTILES_TILE_TIMING=1",
                                                                       "-DTILES_ATTN_SPLIT=2"]),
    "tile_timing_attn_split3": (CUDA_DIR / "decode_kernel_default.cu", ["-DTILES_TILE_TIMING=1",
                                                                       "-DTILES_ATTN_SPLIT=3"]),
    "tile_timing_attn_landing": (CUDA_DIR / "decode_kernel_default.cu", ["-DTILES_TILE_TIMING=1",
                                                                        "-DTILES_ATTN_LANDING"]),
    "tile_timing_attn_profile": (CUDA_DIR / "decode_kernel_default.cu", ["-DTILES_TILE_TIMING=1",
                                                                        "-DTILES_ATTN_PROFILE"]),
    # The fused MLP's epilogue cost for scripts/wait_bound.py (setup.py TILES_PROBE_MLP_REDUCE=1; timing only).
    "decode_kernel_default_probe_mlp_reduce": (CUDA_DIR / "decode_kernel_default.cu", ["-DTILES_PROBE_MLP_REDUCE=1"]),
    # The flag-hand-off variant as the timing tool links it (scripts/tile_timing.py).
    "tile_timing_flags": (CUDA_DIR / "decode_kernel_flags.cu", ["-DTILES_TILE_TIMING=1"]),
    # The flag kernel at the counter kernel's kUnroll (setup.py TILES_FLAGS_KUNROLL=4; its default is 3).
    "decode_kernel_flags_kunroll4": (CUDA_DIR / "decode_kernel_flags.cu", ["-DTILES_FLAGS_KUNROLL=4"]),
    # The default variant compiled for another option set (setup.py TILES_DEFAULT_OPT; 156255 = 25183 + PollAhead
    # selects the poll instantiation).
    "decode_kernel_default_opt_poll": (CUDA_DIR / "decode_kernel_default.cu", ["-DTILES_DEFAULT_OPT=156255"]),
    # Bulk staging without its run-ahead as the default variant (128 + 256; perf log, session 16: +13%).
    "decode_kernel_default_opt_bulk": (CUDA_DIR / "decode_kernel_default.cu", ["-DTILES_DEFAULT_OPT=25567"]),
    # The warp path's scores and o update on the CUDA cores (setup.py TILES_ATTN_TC=0; the default is v63's tensor
    # cores).
    "decode_kernel_default_attn_ffma": (CUDA_DIR / "decode_kernel_default.cu", ["-DTILES_ATTN_TC=0"]),
    "decode_kernel_flags_attn_ffma": (CUDA_DIR / "decode_kernel_flags.cu", ["-DTILES_ATTN_TC=0"]),
}


@pytest.mark.parametrize("name", sorted(TOOL_BUILDS))
def test_nvcc_compiles_measurement_tools(name, tmp_path):
    nvcc = _nvcc()
    if nvcc is None:
        pytest.skip("nvcc not found (PATH, $CUDA_HOME, /usr/local/cuda): CUDA sources not compiled")
    source, defines = TOOL_BUILDS[name]
    cmd = [nvcc, *NVCC_FLAGS, "-O3", *defines, f"-I{REPO / 'csrc'}", f"-I{REPO / 'csrc' / 'generated'}",
           "-Xcompiler", "-fPIC", "-c", str(source), "-o", str(tmp_path / (name + ".o"))]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, f"{' '.join(cmd)}\n{out.stdout[-3000:]}\n{out.stderr[-6000:]}"


def test_default_variant_refuses_an_option_set_it_cannot_compile(tmp_path):
    """TILES_DEFAULT_OPT with the ring (1024) or the stream (65536): a compile error that names the reason, not a
    variant that silently runs the plain path for a set that asked for the ring."""
    nvcc = _nvcc()
    if nvcc is None:
        pytest.skip("nvcc not found (PATH, $CUDA_HOME, /usr/local/cuda): CUDA sources not compiled")
    for opt in (25183 | 1024, 25183 | 65536):
        cmd = [nvcc, *NVCC_FLAGS, "-O3", f"-DTILES_DEFAULT_OPT={opt}", f"-I{REPO / 'csrc'}",
               f"-I{REPO / 'csrc' / 'generated'}", "-Xcompiler", "-fPIC", "-c",
               str(CUDA_DIR / "decode_kernel_default.cu"), "-o", str(tmp_path / "x.o")]
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        assert out.returncode != 0, f"TILES_DEFAULT_OPT={opt} compiled"
        assert "the default variant compiles the plain or the poll instantiation only" in out.stdout + out.stderr


def _glue_sources() -> list[Path]:
    # tiles_op.cpp too: a CUDA build compiles it with TILES_WITH_CUDA (the kernel's constants for tiles_ext._C).
    return sorted(CUDA_DIR.glob("*.cpp")) + [REPO / "csrc" / "tiles_op.cpp"]


@pytest.mark.parametrize("source", _glue_sources(), ids=lambda p: p.name)
def test_cuda_glue_syntax(source, tmp_path):
    """The torch-facing CUDA glue compiles (syntax and types) against torch's headers, which the CPU wheel ships
    too. The CPU wheel lacks one generated c10 header (a build-config macro); supply it."""
    if torch.cuda.is_available():
        pytest.skip("the CUDA extension build on this machine compiled it already")
    cuda_include = _cuda_include()
    gxx = shutil.which("g++")
    if cuda_include is None or gxx is None:
        pytest.skip("needs a CUDA toolkit's headers (cuda_runtime_api.h) and g++")
    from torch.utils.cpp_extension import include_paths
    shim = tmp_path / "shim"
    (shim / "c10" / "cuda" / "impl").mkdir(parents=True)
    (shim / "c10" / "cuda" / "impl" / "cuda_cmake_macros.h").write_text(
        "#pragma once\n#define C10_CUDA_BUILD_SHARED_LIBS\n")
    # The standard torch's extension build uses (C++20 from torch 2.10).
    major, minor = (int(x) for x in torch.__version__.split(".")[:2])
    std = "-std=c++20" if (major, minor) >= (2, 10) else "-std=c++17"
    cmd = [gxx, std, "-fsyntax-only", "-w", "-DTILES_WITH_CUDA=1", "-DTORCH_API_INCLUDE_EXTENSION_H",
           "-DTORCH_EXTENSION_NAME=_C", f"-I{REPO / 'csrc'}", f"-I{REPO / 'csrc' / 'generated'}",
           *[f"-I{p}" for p in include_paths()], f"-I{shim}", f"-I{cuda_include}",
           f"-I{sysconfig.get_paths()['include']}", str(source)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    # CUDA math libraries (cuBLAS, cuSPARSE, ...) ship apart from a minimal toolkit; only those may be absent.
    missing = re.findall(r"fatal error: (cu(?:blas|sparse|solver|rand|fft|dnn)\w*\.h): No such file", out.stderr)
    if out.returncode != 0 and missing:
        pytest.skip(f"{source.name} needs {missing[0]} (a CUDA math library header this toolkit lacks; "
                    "include c10/cuda/CUDAStream.h and c10/cuda/CUDAGuard.h instead of ATen/cuda/CUDAContext.h "
                    "to make the glue checkable here)")
    assert out.returncode == 0, f"{' '.join(cmd)}\n{out.stderr[-6000:]}"


# The host sizes every kernel's shared memory with its own smem_layout (kUnroll 4's stage); the flag kernel runs at
# TILES_FLAGS_KUNROLL (3) and lays out its own, smaller stage inside that allocation. Compiled here with the flag
# define and without, for both models' plans: the flag kernel's layout must fit inside the host's allocation.
_SMEM_PROBE = r"""
#include <cstdio>
#include <cstring>
#include "cuda/decode_kernel.h"
int main() {
  int32_t w[tiles::kHeaderWords];
  for (int i = 0; i < tiles::kHeaderWords; ++i)
    if (std::scanf("%d", &w[i]) != 1) return 2;
  tiles::Header h;
  std::memcpy(&h, w, sizeof h);
  const tiles::cuda::SmemLayout L = tiles::cuda::smem_layout(h, tiles::cuda::kOptDefault);
  std::printf("%d %d %d %d\n", tiles::cuda::kUnroll, L.total, L.stage, L.kbuf2);
  return 0;
}
"""


def test_flag_kernel_shared_memory_fits_the_hosts(tmp_path):
    cuda_inc = _cuda_include()
    gxx = shutil.which("g++")
    if cuda_inc is None or gxx is None:
        pytest.skip("needs g++ and the CUDA runtime headers")
    from tiles_ext.models import load_config
    from tiles_ext.planner.plan import build_plan
    src = tmp_path / "smem_probe.cpp"
    src.write_text(_SMEM_PROBE)
    exes = {}
    for tag, defs in (("host", []), ("flags", ["-DTILES_FLAGS=1"])):
        exes[tag] = tmp_path / f"probe_{tag}"
        cmd = [gxx, "-std=c++17", "-O0", *defs, f"-I{REPO / 'csrc'}", f"-I{REPO / 'csrc' / 'generated'}",
               f"-I{cuda_inc}", str(src), "-o", str(exes[tag])]
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, f"{' '.join(cmd)}\n{out.stderr[-4000:]}"
    for name in ("llama-3.2-1b", "smollm2-135m"):
        words = " ".join(str(x) for x in build_plan(load_config(name), workers=132).header_words())
        got = {}
        for tag, exe in exes.items():
            out = subprocess.run([str(exe)], input=words, capture_output=True, text=True, timeout=60)
            assert out.returncode == 0, out.stderr
            got[tag] = [int(x) for x in out.stdout.split()]
        u_host, total_host, stage_host, _ = got["host"]
        u_flags, total_flags, stage_flags, kbuf2_flags = got["flags"]
        assert (u_host, u_flags) == (4, 3), f"{name}: kUnroll host {u_host}, flag kernel {u_flags}"
        assert total_flags <= total_host, f"{name}: the flag kernel needs {total_flags} B, the host gives {total_host}"
        # The same offsets up to the stage, which is a quarter smaller; the second K/V chunk still fits inside it.
        assert stage_flags == stage_host and kbuf2_flags == stage_flags, (name, got)
