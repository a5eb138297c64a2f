"""tiles::read_checksum, the benchmark's read pass (tiles_ext/bench/bandwidth.py): the sum of a buffer's 32-bit words.

CPU: the reference against numpy, opcheck (schema, fake kernel), and the argument errors. CUDA (skipped without a GPU): the sweep reads every byte
(its sum equals the CPU's on sizes that do and do not divide among the blocks), and the benchmark's bandwidth
measurement runs it and takes the fastest reader.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

import tiles_ext  # noqa: F401  (registers torch.ops.tiles)

cuda_only = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def words_sum(x: torch.Tensor) -> int:
    return int(x.cpu().contiguous().view(torch.uint8).numpy().view(np.uint32).astype(np.uint64).sum())


def random_bytes(nbytes: int, seed: int, device="cpu") -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, 256, (nbytes,), dtype=torch.uint8, generator=g)
    return x.to(device)


@pytest.mark.parametrize("nbytes", [0, 16, 48, 4096, 1 << 20])
def test_cpu_sum_of_words(nbytes):
    x = random_bytes(nbytes, seed=nbytes)
    got = torch.ops.tiles.read_checksum(x)
    assert got.dtype == torch.int64 and got.dim() == 0
    assert int(got) == words_sum(x)


def test_cpu_any_dtype_counts_the_same_bytes():
    x = random_bytes(1 << 12, seed=3)
    assert int(torch.ops.tiles.read_checksum(x.view(torch.bfloat16))) == words_sum(x)
    # All-ones words: the sum is exact in 64 bits where 32 would wrap.
    ones = torch.full((1 << 12,), 0xFF, dtype=torch.uint8)
    assert int(torch.ops.tiles.read_checksum(ones)) == (1 << 10) * 0xFFFFFFFF


def test_opcheck_cpu():
    torch.library.opcheck(torch.ops.tiles.read_checksum.default, (random_bytes(256, seed=1),))


def test_cpu_argument_errors_name_the_problem():
    with pytest.raises(RuntimeError, match="multiple of 16 bytes"):
        torch.ops.tiles.read_checksum(torch.zeros(10, dtype=torch.uint8))
    with pytest.raises(RuntimeError, match="contiguous"):
        torch.ops.tiles.read_checksum(torch.zeros(64, 64, dtype=torch.float32).t())
    with pytest.raises(RuntimeError, match="16-byte aligned"):
        torch.ops.tiles.read_checksum(torch.zeros(80, dtype=torch.uint8)[8:72])


@cuda_only
@pytest.mark.parametrize("nbytes", [16, 16 * 131, 16 * 133 * 4099 + 16 * 7, 64 << 20])
def test_cuda_sweep_reads_every_byte(nbytes):
    x = random_bytes(nbytes, seed=nbytes, device="cuda")
    got = torch.ops.tiles.read_checksum(x)
    assert got.device.type == "cuda" and got.dtype == torch.int64
    assert int(got) == int(torch.ops.tiles.read_checksum(x.cpu())) == words_sum(x)


@cuda_only
def test_cuda_sweep_errors_and_empty():
    assert int(torch.ops.tiles.read_checksum(torch.empty(0, device="cuda"))) == 0
    with pytest.raises(RuntimeError, match="16-byte aligned"):
        torch.ops.tiles.read_checksum(torch.zeros(80, dtype=torch.uint8, device="cuda")[8:72])


@cuda_only
def test_cuda_bandwidth_measurement_includes_the_sweep():
    from tiles_ext.bench.bandwidth import SWEEP, measure_read_bandwidth
    r = measure_read_bandwidth(torch.device("cuda"), gib=0.5, reps=3)
    assert SWEEP in r["readers"]
    assert r["bytes_per_s"] == max(v["bytes_per_s"] for v in r["readers"].values())
