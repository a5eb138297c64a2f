"""The kernel's div_small (csrc/cuda/matvec.cuh): floor(a / b) as (a + 0.5) * rcp(b) in fp32 (the product
rounded to nearest, then truncated) equals the integer division over its whole stated domain (0 <= a < 2^16,
1 <= b <= 64) with the reciprocal exact-rounded or one ulp off either way (rcp.approx.ftz.f32 errs by at most one
ulp). numpy's float32 product rounds as the GPU's FMUL.RN does."""
import re
from pathlib import Path

import numpy as np

KERNEL = Path(__file__).resolve().parents[1] / "csrc" / "cuda" / "matvec.cuh"


def test_kernel_uses_the_checked_formula():
    src = KERNEL.read_text()
    body = re.search(r"int32_t div_small\(int32_t a, int32_t b\) \{(.*?)\n\}", src, re.S)
    assert body, "div_small not found in matvec.cuh"
    assert 'rcp.approx.ftz.f32 %0, %1;' in body.group(1)
    assert "(static_cast<float>(a) + 0.5f) * r" in body.group(1)


def test_div_small_is_exact_on_its_domain():
    a = np.arange(0, 1 << 16, dtype=np.int64)
    for b in range(1, 65):
        exact = np.float32(1.0) / np.float32(b)
        for rcp in (np.nextafter(exact, np.float32(0)), exact, np.nextafter(exact, np.float32(1))):
            q = (a.astype(np.float32) + np.float32(0.5)) * rcp
            assert q.dtype == np.float32
            got = np.trunc(q).astype(np.int64)
            bad = np.nonzero(got != a // b)[0]
            assert bad.size == 0, f"b={b}, rcp={rcp!r}: a={a[bad[:5]].tolist()} give {got[bad[:5]].tolist()}"


def test_the_domain_bound_is_tight_enough_to_matter():
    """Without the + 0.5 the same arithmetic fails (so the test above would catch a changed formula)."""
    a = np.arange(0, 1 << 16, dtype=np.int64)
    fails = 0
    for b in range(1, 65):
        q = a.astype(np.float32) * (np.float32(1.0) / np.float32(b))
        fails += int((np.trunc(q).astype(np.int64) != a // b).sum())
    assert fails > 0
