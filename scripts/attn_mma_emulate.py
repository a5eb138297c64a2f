"""Emulates the TILES_ATTN_MMA fragment code of attn_tile lane by lane (PTX m16n8k16 fragment definitions) and
compares scores and o partials with a direct computation. Index math check only (hardware rounding not modelled).
That code (perf log v30, v31) was removed in session 26, superseded by v63 (TILES_ATTN_TC); this stays as the record
of how its fragments were checked, and its mma() as an emulation of the PTX m16n8k16 layout that v63 uses too."""
import numpy as np
rng = np.random.default_rng(0)

def bf16(x):
    x = np.asarray(x, dtype=np.float32)
    u = x.view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
    return r.astype(np.uint32).view(np.float32)

def mma(A, B, D):
    """A: [32 lanes][4 regs][2 halves], B: [32][2][2], D: [32][4] -> D + A@B per PTX fragment layout."""
    Am = np.zeros((16, 16), np.float32); Bm = np.zeros((16, 8), np.float32)
    for lane in range(32):
        g, t = lane >> 2, lane & 3
        for reg in range(4):
            row = g + (8 if reg in (1, 3) else 0)
            col = 2 * t + (8 if reg >= 2 else 0)
            Am[row, col] = A[lane][reg][0]; Am[row, col + 1] = A[lane][reg][1]
        for reg in range(2):
            k = 2 * t + 8 * reg
            Bm[k, g] = B[lane][reg][0]; Bm[k + 1, g] = B[lane][reg][1]
    C = Am.astype(np.float64) @ Bm.astype(np.float64)
    out = [list(d) for d in D]
    for lane in range(32):
        g, t = lane >> 2, lane & 3
        out[lane][0] += C[g, 2 * t]; out[lane][1] += C[g, 2 * t + 1]
        out[lane][2] += C[g + 8, 2 * t]; out[lane][3] += C[g + 8, 2 * t + 1]
    return out

def split(x0, x1):
    h0, h1 = bf16(x0), bf16(x1)
    return (h0, h1), (bf16(x0 - h0), bf16(x1 - h1))

def scores_tile(qf, K, row0, hd, G):
    """C fragments of one 8-position score tile (rows row0..row0+7 of K), q split into hi + lo halves, as the
    kernel's mma_scores8 computes them."""
    d = [[0.0] * 4 for _ in range(32)]
    for k0 in range(0, hd, 16):
        Ah, Al, Bf = [], [], []
        for lane in range(32):
            r, t2 = lane >> 2, (lane & 3) * 2
            h0 = l0 = h2 = l2 = (0.0, 0.0)
            if r < G:
                h0, l0 = split(qf[r, k0 + t2], qf[r, k0 + t2 + 1])
                h2, l2 = split(qf[r, k0 + t2 + 8], qf[r, k0 + t2 + 9])
            Ah.append([h0, (0, 0), h2, (0, 0)]); Al.append([l0, (0, 0), l2, (0, 0)])
            row = row0 + r
            Bf.append([(K[row, k0 + t2], K[row, k0 + t2 + 1]), (K[row, k0 + t2 + 8], K[row, k0 + t2 + 9])])
        d = mma(Ah, Bf, d); d = mma(Al, Bf, d)
    return d


def run(G, hd, chunk, cn, kWarps=16):
    kstride, vs, scs = hd + 8, hd + 8, chunk + 8
    qf = rng.standard_normal((G, hd + 4)).astype(np.float32)
    K = bf16(rng.standard_normal((chunk, hd)))
    V = bf16(rng.standard_normal((chunk, hd)))
    K[cn:] = np.nan; V[cn:] = np.nan  # stale rows
    scale = 1 / np.sqrt(hd)
    sc = np.full((G, scs), np.nan, np.float32)
    # scores
    for warp in range(kWarps):
        nt = warp
        while nt * 8 < cn:
            d = scores_tile(qf, K, nt * 8, hd, G)
            for lane in range(32):
                r, t2 = lane >> 2, (lane & 3) * 2
                if r < G:
                    sc[r, nt * 8 + t2] = d[lane][0] * scale; sc[r, nt * 8 + t2 + 1] = d[lane][1] * scale
            nt += kWarps
    ref = (qf[:, :hd].astype(np.float64) @ K[:cn].astype(np.float64).T) * scale
    e1 = np.abs(sc[:, :cn] - ref).max()
    # probabilities (any values), then o partials
    P = np.exp(sc[:, :cn] - sc[:, :cn].max(1, keepdims=True)).astype(np.float32)
    sc[:, :cn] = P
    ndt = hd // 8; nsp = kWarps // ndt; span = (chunk // nsp + 15) // 16 * 16
    opart = np.zeros((nsp, G, hd))
    for warp in range(kWarps):
        dt, ph = warp % ndt, warp // ndt
        d = [[0.0] * 4 for _ in range(32)]
        k0 = ph * span
        while k0 < (ph + 1) * span and k0 < cn:
            Ah, Al, Bf = [], [], []
            for lane in range(32):
                r, t2 = lane >> 2, (lane & 3) * 2
                h0 = l0 = h2 = l2 = (0.0, 0.0)
                if r < G:
                    p = lambda k: sc[r, k] if k < cn else 0.0
                    h0, l0 = split(p(k0 + t2), p(k0 + t2 + 1)); h2, l2 = split(p(k0 + t2 + 8), p(k0 + t2 + 9))
                Ah.append([h0, (0, 0), h2, (0, 0)]); Al.append([l0, (0, 0), l2, (0, 0)])
                v = lambda k: V[k, dt * 8 + r] if k < cn else 0.0
                Bf.append([(v(k0 + t2), v(k0 + t2 + 1)), (v(k0 + t2 + 8), v(k0 + t2 + 9))])
            d = mma(Ah, Bf, d); d = mma(Al, Bf, d)
            k0 += 16
        for lane in range(32):
            r, t2 = lane >> 2, (lane & 3) * 2
            if r < G:
                opart[ph, r, dt * 8 + t2] = d[lane][0]; opart[ph, r, dt * 8 + t2 + 1] = d[lane][1]
    o = opart.sum(0)
    oref = P.astype(np.float64) @ V[:cn].astype(np.float64)
    e2 = np.abs(o - oref).max() / np.abs(oref).max()
    print(f"G={G} hd={hd} chunk={chunk} cn={cn}: scores max err {e1:.2e}, o rel err {e2:.2e}")
    assert e1 < 1e-3 and e2 < 1e-4

for G, hd, chunk, cn in [(4, 64, 128, 128), (4, 64, 128, 33), (3, 64, 128, 100), (4, 128, 64, 64), (8, 128, 64, 17),
                         (4, 64, 128, 1)]:
    run(G, hd, chunk, cn)


def run_warp_pipeline(G, hd, n_pos, kWarps=16):
    """TILES_ATTN_MMA=2: every warp keeps (m, l, o) of its own 8 positions of each 128-position chunk in registers,
    then one log-sum-exp combine in warp order. Emulated lane by lane over several chunks (the last one partial)."""
    chunk = 8 * kWarps
    qf = rng.standard_normal((G, hd + 4)).astype(np.float32)
    K = bf16(rng.standard_normal((n_pos, hd)))
    V = bf16(rng.standard_normal((n_pos, hd)))
    scale = np.float32(1 / np.sqrt(hd))
    st = [dict(m=[-np.inf] * 32, l=[0.0] * 32, o=[[[0.0] * 4 for _ in range(32)] for _ in range(hd // 8)])
          for _ in range(kWarps)]
    for c0 in range(0, n_pos, chunk):
        cn = min(chunk, n_pos - c0)
        kb = np.full((chunk, hd), np.nan, np.float32); kb[:cn] = K[c0:c0 + cn]
        vb = np.full((chunk, hd), np.nan, np.float32); vb[:cn] = V[c0:c0 + cn]
        for warp in range(kWarps):
            p0 = warp * 8
            if p0 >= cn:
                continue
            d = scores_tile(qf, kb, p0, hd, G)
            S = st[warp]
            e = {}
            for lane in range(32):  # lanes of a row group see each other's values through the two shuffles
                r, t2 = lane >> 2, (lane & 3) * 2
                in0, in1 = p0 + t2 < cn, p0 + t2 + 1 < cn
                s0 = d[lane][0] * scale if in0 else -np.inf
                s1 = d[lane][1] * scale if in1 else -np.inf
                e[lane] = (s0, s1, in0, in1)
            for lane in range(32):
                r, t2 = lane >> 2, (lane & 3) * 2
                grp = range(4 * r, 4 * r + 4)
                mx = max(max(e[q][0], e[q][1]) for q in grp)
                mn = max(S["m"][lane], mx)
                alpha = 0.0 if S["m"][lane] == -np.inf else np.exp(S["m"][lane] - mn)
                ex = lambda q: ((np.exp(e[q][0] - mn) if e[q][2] else 0.0), (np.exp(e[q][1] - mn) if e[q][3] else 0.0))
                ls = sum(sum(ex(q)) for q in grp)
                S["l"][lane] = S["l"][lane] * alpha + ls
                S["m"][lane] = mn
                e[lane] = e[lane] + (ex(lane), alpha)
            for n in range(hd // 8):
                Ah, Al, Bf = [], [], []
                for lane in range(32):
                    r, t2 = lane >> 2, (lane & 3) * 2
                    (e0, e1), alpha = e[lane][4], e[lane][5]
                    S["o"][n][lane][0] *= alpha; S["o"][n][lane][1] *= alpha
                    hi, lo = split(e0, e1)
                    if r >= G:
                        hi = lo = (0.0, 0.0)
                    Ah.append([hi, (0, 0), (0, 0), (0, 0)]); Al.append([lo, (0, 0), (0, 0), (0, 0)])
                    in0, in1 = e[lane][2], e[lane][3]
                    Bf.append([(vb[p0 + t2, n * 8 + r] if in0 else 0.0, vb[p0 + t2 + 1, n * 8 + r] if in1 else 0.0),
                               (0.0, 0.0)])
                S["o"][n] = mma(Ah, Bf, S["o"][n]); S["o"][n] = mma(Al, Bf, S["o"][n])
    # combine in warp order
    m = np.full((kWarps, G), -np.inf); l = np.zeros((kWarps, G)); o = np.zeros((kWarps, G, hd))
    for warp in range(kWarps):
        for lane in range(32):
            r, t2 = lane >> 2, (lane & 3) * 2
            if r < G:
                for n in range(hd // 8):
                    o[warp, r, n * 8 + t2] = st[warp]["o"][n][lane][0]; o[warp, r, n * 8 + t2 + 1] = st[warp]["o"][n][lane][1]
                if t2 == 0:
                    m[warp, r] = st[warp]["m"][lane]; l[warp, r] = st[warp]["l"][lane]
    M = m.max(0)
    f = np.where(np.isinf(m), 0.0, np.exp(m - M))
    Ls = (f * l).sum(0); O = (f[:, :, None] * o).sum(0)
    s = (qf[:, :hd].astype(np.float64) @ K.astype(np.float64).T) * scale
    Mref = s.max(1); P = np.exp(s - Mref[:, None])
    oref = P @ V.astype(np.float64) / P.sum(1, keepdims=True)
    err = np.abs(O / Ls[:, None] - oref).max() / np.abs(oref).max()
    print(f"warp pipeline G={G} hd={hd} positions={n_pos}: max m err {np.abs(M - Mref).max():.2e}, o/l rel err {err:.2e}")
    assert np.abs(M - Mref).max() < 1e-4 and err < 1e-4


for G, hd, n in [(4, 64, 128), (4, 64, 300), (3, 64, 33), (8, 64, 7), (4, 32, 200), (4, 64, 1)]:
    run_warp_pipeline(G, hd, n)
