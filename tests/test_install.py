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
        "(rebuild with a CUDA toolkit present: pip install --no-build-isolation --no-deps -e .)")


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


# The per-tile timing build (scripts/tile_timing.py builds it with nvcc on the GPU machine): every kernel and the
# launcher with TILE_TIMING on, compiled here too, so that a kernel change that breaks the timing build fails CI, not
# a device call.
TOOL_BUILDS = {f"tile_timing_{p.stem}": (p, ["-DTILE_TIMING=1"]) for p in sorted(CUDA_DIR.glob("decode_kernel_*.cu"))}
TOOL_BUILDS["tile_timing_launch"] = (REPO / "scripts" / "tile_timing_launch.cu", ["-DTILE_TIMING=1"])


def test_the_kernels_are_one_translation_unit_per_handoff_head_dim_and_sampler():
    """Counter / flag hand-offs x the attention's head_dims (planner/format.py ATTN_WARPS_HEAD_DIMS) x without / with
    the sampler, and the FP8 kernels (counter hand-offs, kernel_config.cuh TILE_FP8) x the head_dims x the sampler:
    each its own compilation of decode_kernel.cuh with TILE_HEAD_DIM set, exporting
    decode_<hand-off>_hd<head_dim>[_fp8][_sampler]_*, which decode_kernel.h declares and launches for every head_dim
    of the generated TILE_ATTN_HEAD_DIMS; the build compiles exactly these kernels, and every head_dim a family serves
    has its kernels."""
    from tiles_ext.families.base import HEAD_DIMS
    from tiles_ext.planner import format as fmt
    variants = [("counters", ""), ("flags", ""), ("counters", "_fp8")]
    rows = {p.name for p in CUDA_DIR.glob("decode_kernel_rows_*.cu")}
    lookups = {p.name for p in CUDA_DIR.glob("decode_kernel_lookup_*.cu")}
    names = {p.name for p in CUDA_DIR.glob("decode_kernel_*.cu")} - rows - lookups
    assert names == {f"decode_kernel_{h}_hd{hd}{f}{s}.cu" for h, f in variants for hd in fmt.ATTN_WARPS_HEAD_DIMS
                     for s in ("", "_sampler")}
    # The rows kernels (a pass of several rows, decode_rows.cuh) and the prompt-lookup kernels (every round of
    # tiles::prompt_lookup, decode_rows.cuh with TILE_LOOKUP): one each per head_dim, counter hand-offs, BF16.
    for kind, files, define in (("rows", rows, "TILE_ROWS"), ("lookup", lookups, "TILE_LOOKUP")):
        assert files == {f"decode_kernel_{kind}_hd{hd}.cu" for hd in fmt.ATTN_WARPS_HEAD_DIMS}
        for n in files:
            hd = re.fullmatch(rf"decode_kernel_{kind}_hd(\d+)\.cu", n).group(1)
            text = (CUDA_DIR / n).read_text()
            assert f"#define TILE_HEAD_DIM {hd}\n" in text and f"#define {define} 1\n" in text, n
            assert f"#define TILE_VARIANT(name) decode_{kind}_hd{hd}_##name" in text, n
    assert set(HEAD_DIMS) <= set(fmt.ATTN_WARPS_HEAD_DIMS)
    for n in names:
        handoff, hd, fp8, sampler = re.fullmatch(r"decode_kernel_(counters|flags)_hd(\d+)(_fp8)?(_sampler)?\.cu",
                                                 n).groups()
        text = (CUDA_DIR / n).read_text()
        assert f"#define TILE_HEAD_DIM {hd}\n" in text, n
        assert f"#define TILE_VARIANT(name) decode_{handoff}_hd{hd}{fp8 or ''}{sampler or ''}_##name" in text, n
        assert ("#define TILE_FLAG_HANDOFF 1" in text) == (handoff == "flags"), n
        assert ("#define TILE_SAMPLER 1" in text) == bool(sampler), n
        assert ("#define TILE_FP8 1" in text) == bool(fp8), n
    header = (CUDA_DIR / "decode_kernel.h").read_text()
    for entry in ("decode_rows_hd##HD##_set_smem_limit(bytes)", "decode_rows_hd##HD##_blocks_per_sm(smem_bytes",
                  "decode_rows_hd##HD##_launch(p, stream)", "TILE_DECLARE_KERNEL(decode_rows_hd##HD)",
                  "decode_lookup_hd##HD##_set_smem_limit(bytes)", "decode_lookup_hd##HD##_blocks_per_sm(smem_bytes",
                  "decode_lookup_hd##HD##_launch(p, stream)", "TILE_DECLARE_KERNEL(decode_lookup_hd##HD)"):
        assert entry in header, entry
    for handoff, fp8 in variants:
        for sampler in ("", "_sampler"):
            suffix = fp8 + sampler
            name = f"decode_{handoff}_hd##HD{'##' + suffix if suffix else ''}"
            assert f"TILE_DECLARE_KERNEL({name})" in header, name
            # The token pasted after HD: `##_fp8_sampler_set_smem_limit` or `##_set_smem_limit`.
            entry = f"decode_{handoff}_hd##HD##{suffix + '_' if suffix else '_'}"
            assert f"{entry}set_smem_limit(bytes)" in header, entry
            assert f"take({entry}blocks_per_sm)" in header, entry


# The environment variables the native code and the build read: these, and no others (the README documents them).
NATIVE_ENV_VARS = {"TILES_WAIT_TIMEOUT_MS", "TILES_SYNC_CHECK", "TILES_FORCE_CPU"}


def test_native_code_reads_only_the_documented_environment():
    """csrc/ and setup.py name no TILES_* but the kept environment variables: macros are TILE_*, knobs are gone."""
    found = {}
    for path in [REPO / "setup.py", *sorted((REPO / "csrc").rglob("*"))]:
        if path.is_file() and path.suffix in {".py", ".h", ".cpp", ".cu", ".cuh"}:
            for name in re.findall(r"TILES_[A-Z0-9_]+", path.read_text()):
                found.setdefault(name, set()).add(path.relative_to(REPO).as_posix())
    assert set(found) <= NATIVE_ENV_VARS, {k: sorted(v) for k, v in found.items() if k not in NATIVE_ENV_VARS}


def _glue_sources() -> list[Path]:
    # tiles_op.cpp too: a CUDA build compiles it with TILE_WITH_CUDA (the build's constants for tiles_ext._C).
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
    cmd = [gxx, std, "-fsyntax-only", "-w", "-DTILE_WITH_CUDA=1", "-DTORCH_API_INCLUDE_EXTENSION_H",
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


# The host sizes every kernel's shared memory with its own smem_layout (kUnroll 4's stage); the flag kernels run at
# kUnroll 3 and lay out their own, smaller stage inside that allocation. Compiled here with the flag define and
# without, for the plans of every shipped config: the flag kernels' layout must fit inside the host's allocation, and
# both within the per-block limit.
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
  const tiles::cuda::SmemLayout L = tiles::cuda::smem_layout(h);
  const tiles::cuda::SmemLayout R = tiles::cuda::smem_layout_rows(h);
  std::printf("%d %d %d %d %d %d\n", tiles::cuda::kUnroll, L.total, L.stage, L.kbuf2, tiles::cuda::kMaxSmemPerBlock,
              R.total);
  return 0;
}
"""


def test_flag_kernel_shared_memory_fits_the_hosts(tmp_path):
    cuda_inc = _cuda_include()
    gxx = shutil.which("g++")
    if cuda_inc is None or gxx is None:
        pytest.skip("needs g++ and the CUDA runtime headers")
    from tiles_ext.models import available_configs, load_config
    from tiles_ext.planner.plan import build_plan
    src = tmp_path / "smem_probe.cpp"
    src.write_text(_SMEM_PROBE)
    exes = {}
    for tag, defs in (("host", []), ("flags", ["-DTILE_FLAG_HANDOFF=1"])):
        exes[tag] = tmp_path / f"probe_{tag}"
        cmd = [gxx, "-std=c++17", "-O0", *defs, f"-I{REPO / 'csrc'}", f"-I{REPO / 'csrc' / 'generated'}",
               f"-I{cuda_inc}", str(src), "-o", str(exes[tag])]
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, f"{' '.join(cmd)}\n{out.stderr[-4000:]}"
    # Every head_dim (64, 96, 128), G 1-7, q widths other than hidden, the q/k/v biases and norms.
    names = available_configs()
    assert {"llama-3.2-1b", "llama-3.1-8b", "qwen2.5-7b", "qwen3-8b", "phi-3-mini-4k"} <= set(names)
    for name in names:
        words = " ".join(str(x) for x in build_plan(load_config(name), workers=132, validate=False).header_words())
        got = {}
        for tag, exe in exes.items():
            out = subprocess.run([str(exe)], input=words, capture_output=True, text=True, timeout=60)
            assert out.returncode == 0, out.stderr
            got[tag] = [int(x) for x in out.stdout.split()]
        u_host, total_host, stage_host, _, limit, total_rows = got["host"]
        u_flags, total_flags, stage_flags, kbuf2_flags, _, _ = got["flags"]
        assert total_rows <= limit, f"{name}: the rows kernel needs {total_rows} B of shared memory, the limit is {limit}"
        assert (u_host, u_flags) == (4, 3), f"{name}: kUnroll host {u_host}, flag kernel {u_flags}"
        assert total_flags <= total_host, f"{name}: the flag kernel needs {total_flags} B, the host gives {total_host}"
        assert total_host <= limit, f"{name}: {total_host} B of shared memory per block, the limit is {limit}"
        # The same offsets up to the stage, which is a quarter smaller; the second K/V chunk still fits inside it.
        assert stage_flags == stage_host and kbuf2_flags == stage_flags, (name, got)
