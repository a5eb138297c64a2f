"""Builds tiles_ext and its compiled op library tiles_ext._C.

CUDAExtension when a CUDA torch and a CUDA toolkit are present, else CppExtension (the CPU reference executor
only). Install: `pip install --no-build-isolation -e .` (torch must already be installed: the build links it).

Environment:
  TORCH_CUDA_ARCH_LIST  CUDA targets, default "9.0a" (H100/H200; the kernel uses sm_90a-only instructions).
  MAX_JOBS              parallel compile jobs for ninja (default: all cores).
  TILES_FORCE_CPU=1     build the CPU-only extension even where CUDA is available.
"""
import glob
import os
import re
import sys
import time

from setuptools import find_packages, setup

import torch
from torch.utils.cpp_extension import CUDA_HOME, BuildExtension, CppExtension, CUDAExtension

ROOT = os.path.dirname(os.path.abspath(__file__))


def _version() -> str:
    with open(os.path.join(ROOT, "tiles_ext", "__init__.py")) as f:
        return re.search(r'^__version__ = "([^"]+)"', f.read(), re.M).group(1)


def _rel(pattern: str) -> list[str]:
    # setuptools wants paths relative to setup.py.
    return sorted(os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, pattern)))


def _gencode_flags(arch_list: str) -> list[str]:
    """'9.0a;8.0+PTX' -> explicit -gencode flags. Explicit because `-arch=sm_90a` alone also emits a
    compute_90a PTX pass, doubling device compile time for nothing."""
    flags = []
    for arch in re.split(r"[;\s,]+", arch_list.strip()):
        if not arch:
            continue
        ptx = arch.endswith("+PTX")
        num = arch.replace("+PTX", "").replace(".", "")
        flags.append(f"-gencode=arch=compute_{num},code=sm_{num}")
        if ptx:
            flags.append(f"-gencode=arch=compute_{num},code=compute_{num}")
    return flags


# Same flags as the nvcc syntax check in tests/test_install.py (keep the two in step). The -U flags undo
# torch's defaults that hide cuda_bf16.h operators, so the kernel compiles identically with and without torch.
NVCC_COMMON = ["-std=c++17", "--expt-relaxed-constexpr", "-lineinfo",
               "-U__CUDA_NO_HALF_OPERATORS__", "-U__CUDA_NO_HALF_CONVERSIONS__",
               "-U__CUDA_NO_HALF2_OPERATORS__", "-U__CUDA_NO_BFLOAT16_CONVERSIONS__",
               "-U__CUDA_NO_BFLOAT16_OPERATORS__"]


_USE_CUDA = (torch.version.cuda is not None and CUDA_HOME is not None
             and os.environ.get("TILES_FORCE_CPU") != "1")


def _use_system_compiler():
    """On the GPU image, the compiler under /opt (/opt/gcc/bin/g++: Python's sysconfig compiler, and the image's CXX)
    links libstdc++ statically into the extension; the private copy then crashes in torch's c10::str, i.e. in every
    error message. Use the system g++ there."""
    import sysconfig
    if not os.path.exists("/usr/bin/g++"):
        return
    import shutil
    configured = (os.environ.get("CXX") or sysconfig.get_config_var("CXX") or "g++").split()[0]
    resolved = os.path.realpath(shutil.which(configured) or configured)
    if resolved.startswith("/opt/"):
        os.environ.update(CXX="/usr/bin/g++", CC="/usr/bin/gcc", LDSHARED="/usr/bin/g++ -shared")
        print(f"[tiles] using /usr/bin/g++ instead of {resolved} (static libstdc++ breaks torch's c10)")


_use_system_compiler()


def _extension():
    # -g0: Python's own CFLAGS carry -g, which slows the build and bloats the library for nothing here.
    opt = ["-O3", "-g0"]
    use_cuda = _USE_CUDA
    sources = _rel("csrc/*.cpp") + _rel("csrc/cpu/*.cpp")
    if use_cuda:
        sources += _rel("csrc/cuda/*.cu") + _rel("csrc/cuda/*.cpp")
    if not sources:
        sys.exit("setup.py: no C++ sources found under csrc/ (expected csrc/*.cpp, csrc/cpu/*.cpp)")
    include_dirs = [os.path.join(ROOT, "csrc"), os.path.join(ROOT, "csrc", "generated")]
    # Host C++: the standard torch requires (C++20 from torch 2.10; torch adds it). Device code: C++17.
    cxx = list(opt)
    if use_cuda:
        arch_list = os.environ.get("TORCH_CUDA_ARCH_LIST") or "9.0a"
        nvcc = ["-O3"] + NVCC_COMMON + _gencode_flags(arch_list)
        print(f"[tiles] building CUDAExtension (torch {torch.__version__}, CUDA {torch.version.cuda}, "
              f"CUDA_HOME {CUDA_HOME}, arch {arch_list}, MAX_JOBS {os.environ.get('MAX_JOBS', 'all cores')})")
        return CUDAExtension("tiles_ext._C", sources, include_dirs=include_dirs,
                             define_macros=[("TILE_WITH_CUDA", "1")],
                             extra_compile_args={"cxx": cxx, "nvcc": nvcc})
    why = ("TILES_FORCE_CPU=1" if os.environ.get("TILES_FORCE_CPU") == "1"
           else "torch has no CUDA" if torch.version.cuda is None else "no CUDA toolkit (CUDA_HOME unset)")
    print(f"[tiles] building CppExtension, CPU executor only ({why}; torch {torch.__version__})")
    return CppExtension("tiles_ext._C", sources, include_dirs=include_dirs, extra_compile_args={"cxx": cxx})


class TimedBuildExt(BuildExtension):
    """Prints the compile time: GPU time is scarce, so the build's share of it should be visible."""

    def finalize_options(self):
        super().finalize_options()
        # A fixed build folder (pip's editable build would use a fresh temp dir), so ninja recompiles only the
        # sources that changed; one per torch build and kind, so CPU and CUDA builds never share objects.
        tag = f"{'cuda' if _USE_CUDA else 'cpu'}-torch{torch.__version__}-py{sys.version_info[0]}{sys.version_info[1]}"
        self.build_temp = os.path.join(ROOT, "build", tag)

    def run(self):
        t0 = time.perf_counter()
        super().run()
        print(f"[tiles] extension build took {time.perf_counter() - t0:.1f} s", flush=True)


setup(
    name="tiles_ext",
    version=_version(),
    description="Tiles: batch-1 LLM decoding in Hugging Face Transformers at the speed of GPU memory",
    python_requires=">=3.10",
    # planner/ and integrations/ live at the repo root but are only importable as tiles_ext.planner /
    # tiles_ext.integrations; configs/ ships as data inside tiles_ext.configs.
    packages=(["tiles_ext", "tiles_ext.planner", "tiles_ext.integrations", "tiles_ext.configs"]
              + [f"tiles_ext.{p}" for p in find_packages(os.path.join(ROOT, "tiles_ext"))]
              + [f"tiles_ext.planner.{p}" for p in find_packages(os.path.join(ROOT, "planner"))]
              + [f"tiles_ext.integrations.{p}" for p in find_packages(os.path.join(ROOT, "integrations"))]),
    package_dir={"tiles_ext": "tiles_ext", "tiles_ext.planner": "planner",
                 "tiles_ext.integrations": "integrations", "tiles_ext.configs": "configs"},
    package_data={"tiles_ext.configs": ["*.json"]},
    ext_modules=[_extension()],
    cmdclass={"build_ext": TimedBuildExt.with_options(use_ninja=True)},
    install_requires=["torch>=2.4", "transformers>=5.4", "safetensors", "numpy"],
    extras_require={"gguf": ["gguf", "accelerate"], "test": ["pytest", "hypothesis"]},
    zip_safe=False,
)
