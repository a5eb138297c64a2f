"""The llama.cpp row: llama-bench (CUDA build) decoding the same weights, written as a BF16 GGUF.

llama.cpp comes from the PyPI sdist of llama-cpp-python (its vendor/llama.cpp). Building its CUDA backend takes
long (about 150 nvcc jobs), and the GPU machine has no registry, so the binary is built ahead and carried:

    python -m tiles_ext.bench.llamacpp build --sdist llama_cpp_python-0.3.36.tar.gz --out .bench_llamacpp

builds llama-bench for sm_90 (static ggml/llama libraries; CUDA runtime and cuBLAS found at run time among the
installed nvidia-* wheels or the CUDA toolkit) and packs it as .bench_llamacpp/llama-bench-cuda.tar.xz. The
benchmark looks for, in order: --llama-bench PATH (a llama-bench binary), .bench_llamacpp/ (the tarball or an
unpacked bin/llama-bench), llama-bench on PATH. Without one the row is skipped and says why.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

from . import rows

REPO = Path(__file__).resolve().parents[2]
CARRY_DIR = REPO / ".bench_llamacpp"
TARBALL = "llama-bench-cuda.tar.xz"
NOT_FOUND = ("skipped: no llama.cpp CUDA build was carried to this machine. Building it here from the "
             "llama-cpp-python 0.3.36 sdist does not fit the benchmark's one GPU call: the sdist is 76.6 MB (over "
             "the 64 MiB a call carries) and its CUDA backend is ~150 nvcc jobs (minutes even on 16 cores). "
             "A prebuilt llama-bench (python -m tiles_ext.bench.llamacpp build, into .bench_llamacpp/, a few MB) "
             "or --llama-bench PATH enables this row")


def find_llama_bench(given: str | None = None) -> tuple[Path | None, str]:
    """(path of a runnable llama-bench or None, where it came from or why none). `given`: --llama-bench."""
    if given:
        p = Path(given)
        return (p, "--llama-bench") if p.is_file() else (None, f"--llama-bench {given} is not a file")
    unpacked = CARRY_DIR / "bin" / "llama-bench"
    if unpacked.is_file():
        return unpacked, str(unpacked)
    tar = CARRY_DIR / TARBALL
    if tar.is_file():
        dest = Path(tempfile.gettempdir()) / "tiles-llamacpp"
        if not (dest / "bin" / "llama-bench").is_file():
            dest.mkdir(parents=True, exist_ok=True)
            with tarfile.open(tar) as t:
                t.extractall(dest, filter="data") if sys.version_info >= (3, 12) else t.extractall(dest)
        p = dest / "bin" / "llama-bench"
        if p.is_file():
            p.chmod(0o755)
            return p, f"{tar} (unpacked to {dest})"
        return None, f"{tar} holds no bin/llama-bench"
    which = shutil.which("llama-bench")
    if which:
        return Path(which), "PATH"
    return None, NOT_FOUND


def runtime_library_dirs(binary: Path) -> list[str]:
    """Folders holding the CUDA runtime and cuBLAS libraries llama-bench was linked against: next to the binary,
    the nvidia-* wheels (as installed with torch), the CUDA toolkit."""
    dirs = [str(binary.parent.parent / "lib")]
    for root in sys.path:
        dirs += sorted(glob.glob(os.path.join(root, "nvidia", "*", "lib")))
    for cuda in (os.environ.get("CUDA_HOME"), "/usr/local/cuda"):
        if cuda:
            dirs.append(os.path.join(cuda, "lib64"))
    return [d for d in dict.fromkeys(dirs) if os.path.isdir(d)]


def run_llama_bench(binary: Path, gguf: Path, depths: list[int], new_tokens: int, reps: int,
                    timeout_s: float = 240) -> list[dict]:
    """llama-bench's JSON records, one per depth (prompt already in the cache), each with samples_ns."""
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = os.pathsep.join(runtime_library_dirs(binary) + [env.get("LD_LIBRARY_PATH", "")])
    cmd = [str(binary), "-m", str(gguf), "-p", "0", "-n", str(new_tokens), "-d", ",".join(map(str, depths)),
           "-r", str(reps), "-ngl", "99", "-fa", "1", "-o", "json"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=env)
    if p.returncode != 0:
        tail = (p.stderr or p.stdout)[-600:]
        raise RuntimeError(f"llama-bench exited {p.returncode}: {tail}")
    return json.loads(p.stdout)


def llamacpp_rows(row_by_prompt: dict, model, workloads, floors: dict, reps: int, device, binary=None) -> None:
    """Fills one row per workload of this model (dict prompt_len -> row), from one llama-bench run."""
    binary, where = find_llama_bench(binary)
    if binary is None:
        for r in row_by_prompt.values():
            rows.skip(r, where)
        return
    if device.type != "cuda":
        for r in row_by_prompt.values():
            rows.skip(r, "llama.cpp row runs on CUDA only")
        return
    n = workloads[0].new_tokens
    with tempfile.TemporaryDirectory(prefix="tiles-gguf-") as tmp:
        gguf = Path(tmp) / "model-bf16.gguf"
        t0 = time.perf_counter()
        from .gguf_file import write_gguf
        write_gguf(model, gguf)
        write_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        records = run_llama_bench(binary, gguf, [w.prompt_len for w in workloads], n, reps)
        run_s = time.perf_counter() - t0
    by_depth = {int(r.get("n_depth", 0)): r for r in records if int(r.get("n_gen", 0)) > 0}
    for w in workloads:
        row = row_by_prompt[w.prompt_len]
        rec = by_depth.get(w.prompt_len)
        if rec is None:
            rows.fail(row, RuntimeError(f"llama-bench gave no tg record at depth {w.prompt_len}"))
            continue
        ms = [ns / rec["n_gen"] / 1e6 for ns in rec["samples_ns"]]
        row["one_time_s"].update(write_gguf=write_s, llama_bench_process=run_s)
        row["notes"] += [f"llama-bench {rec.get('build_commit', '?')}, -fa 1 -ngl 99, BF16 GGUF of the same "
                         f"weights; {rec['n_gen']} tokens after a {w.prompt_len}-token context, "
                         f"{len(ms)} repetitions", "peak GPU memory: separate process, not measured"]
        row["binary"] = where
        rows.finish(row, ms, floors[w.name])


# --------------------------------------------------------------------------- building the carried binary


def build(sdist: Path, out: Path, jobs: int, cuda_arch: str = "90-real", cublas_root: str | None = None) -> Path:
    """Builds llama-bench (CUDA) from a llama-cpp-python sdist and packs it into out/llama-bench-cuda.tar.xz."""
    work = Path(tempfile.mkdtemp(prefix="tiles-llamacpp-build-"))
    with tarfile.open(sdist) as t:
        t.extractall(work)
    src = next(work.glob("llama_cpp_python-*/vendor/llama.cpp"))
    flags = ["-DCMAKE_BUILD_TYPE=Release", "-DGGML_CUDA=ON", "-DGGML_CUDA_NO_VMM=ON", "-DGGML_CUDA_NCCL=OFF",
             f"-DCMAKE_CUDA_ARCHITECTURES={cuda_arch}", "-DGGML_NATIVE=OFF", "-DBUILD_SHARED_LIBS=OFF",
             "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_BUILD_SERVER=OFF",
             "-DLLAMA_BUILD_APP=OFF", "-DLLAMA_OPENSSL=OFF"]
    if cublas_root:  # cuBLAS from an nvidia-cublas wheel where the toolkit lacks it
        inc, lib = os.path.join(cublas_root, "include"), os.path.join(cublas_root, "lib")
        flags += [f"-DCUDA_cublas_LIBRARY={lib}/libcublas.so.13", f"-DCUDA_cublasLt_LIBRARY={lib}/libcublasLt.so.13",
                  f"-DCMAKE_CUDA_FLAGS=-I{inc}", f"-DCMAKE_CXX_FLAGS=-I{inc}", f"-DCMAKE_C_FLAGS=-I{inc}"]
    bdir = work / "build"
    subprocess.run(["cmake", "-S", str(src), "-B", str(bdir), "-G", "Ninja", *flags], check=True)
    subprocess.run(["ninja", "-C", str(bdir), f"-j{jobs}", "llama-bench"], check=True)
    return pack(bdir / "bin" / "llama-bench", out)


def pack(binary: Path, out: Path) -> Path:
    """bin/llama-bench (stripped) + lib/libgomp (OpenMP runtime of the CPU backend) -> out/TARBALL."""
    out.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix="tiles-llamacpp-pack-"))
    (stage / "bin").mkdir()
    (stage / "lib").mkdir()
    shutil.copy2(binary, stage / "bin" / "llama-bench")
    subprocess.run(["strip", str(stage / "bin" / "llama-bench")], check=False)
    ldd = subprocess.run(["ldd", str(binary)], capture_output=True, text=True).stdout
    for line in ldd.splitlines():
        if "libgomp" in line and "=>" in line:
            shutil.copy2(line.split("=>")[1].split()[0], stage / "lib")
    target = out / TARBALL
    with tarfile.open(target, "w:xz") as t:
        t.add(stage / "bin", arcname="bin")
        t.add(stage / "lib", arcname="lib")
    shutil.rmtree(stage, ignore_errors=True)
    return target


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tiles_ext.bench.llamacpp")
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="build llama-bench (CUDA) from a llama-cpp-python sdist and pack it")
    b.add_argument("--sdist", required=True, type=Path)
    b.add_argument("--out", type=Path, default=CARRY_DIR)
    b.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    b.add_argument("--cuda-arch", default="90-real")
    b.add_argument("--cublas-root", help="folder with include/ and lib/ of cuBLAS (e.g. an unzipped "
                                         "nvidia-cublas wheel's nvidia/cu13) when the CUDA toolkit has none")
    p = sub.add_parser("pack", help="pack an already built llama-bench")
    p.add_argument("--binary", required=True, type=Path)
    p.add_argument("--out", type=Path, default=CARRY_DIR)
    a = ap.parse_args(argv)
    if a.cmd == "build":
        print(build(a.sdist, a.out, a.jobs, a.cuda_arch, a.cublas_root))
    else:
        print(pack(a.binary, a.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
