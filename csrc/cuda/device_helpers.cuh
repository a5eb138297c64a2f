// Small device helpers: bf16 conversions, PTX wrappers (loads, cp.async, ldmatrix, mma), warp and block reductions.
// Part of the decode kernel: decode_kernel.cuh includes it inside its anonymous namespace (tiles::cuda), after
// kernel_config.cuh.
#pragma once

// ---------------------------------------------------------------------------------------------------------------
// Small device helpers
// ---------------------------------------------------------------------------------------------------------------
__device__ __forceinline__ float bf2f(uint16_t b) { return __uint_as_float(static_cast<uint32_t>(b) << 16); }
__device__ __forceinline__ uint16_t f2bf(float f) { return __bfloat16_as_ushort(__float2bfloat16_rn(f)); }
__device__ __forceinline__ float round_bf(float f) { return bf2f(f2bf(f)); }

#include "cuda/ld_weight.cuh"

__device__ __forceinline__ uint32_t ld_acquire(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ uint32_t ld_relaxed(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ void red_release_add(uint32_t* p, uint32_t v) {
  asm volatile("red.release.gpu.global.add.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

__device__ __forceinline__ void red_relaxed_add(uint32_t* p, uint32_t v) {
  asm volatile("red.relaxed.gpu.global.add.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

__device__ __forceinline__ uint64_t global_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__device__ __forceinline__ void cp_async16(void* smem_dst, const void* gmem_src) {
  const uint32_t d = static_cast<uint32_t>(__cvta_generic_to_shared(smem_dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(d), "l"(gmem_src) : "memory");
}

// 4 bytes (.ca: the only sizes below 16): a QKV tile's bias words, whose rows need not start at a 16-byte boundary.
__device__ __forceinline__ void cp_async4(void* smem_dst, const void* gmem_src) {
  const uint32_t d = static_cast<uint32_t>(__cvta_generic_to_shared(smem_dst));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(d), "l"(gmem_src) : "memory");
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;" ::: "memory"); }
// All but this thread's most recent commit group (the attention's double buffer: the next chunk stays in flight).
__device__ __forceinline__ void cp_async_wait_but_last() { asm volatile("cp.async.wait_group 1;" ::: "memory"); }

// The 32-bit shared::cta address of a shared-memory pointer (ldmatrix's operand).
__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ float dot8(uint4 w, uint4 x, float acc) {
  const uint32_t wa[4] = {w.x, w.y, w.z, w.w};
  const uint32_t xa[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    acc = fmaf(__uint_as_float(wa[i] << 16), __uint_as_float(xa[i] << 16), acc);
    acc = fmaf(__uint_as_float(wa[i] & 0xffff0000u), __uint_as_float(xa[i] & 0xffff0000u), acc);
  }
  return acc;
}

// Two E4M3 values (q: element 0 in the low byte) widened exactly to fp32: E4M3 -> f16 (cvt.rn.f16x2.e4m3x2, every
// E4M3 value, subnormals included, is an f16 value) -> f32.
__device__ __forceinline__ float2 e4m3x2_to_float2(uint32_t q) {
  uint32_t h;
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(h) : "h"(static_cast<uint16_t>(q)));
  float2 f;
  asm("{.reg .b16 lo, hi;\n\tmov.b32 {lo, hi}, %2;\n\tcvt.f32.f16 %0, lo;\n\tcvt.f32.f16 %1, hi;}"
      : "=f"(f.x), "=f"(f.y)
      : "r"(h));
  return f;
}

// One 16-byte chunk of an E4M3 row (element k in byte k) times 16 bf16 inputs (x0: elements 0-7, x1: 8-15), added
// to acc in element order. The products of an E4M3 and a bf16 value are exact in fp32, as dot8's are.
__device__ __forceinline__ float dot16_e4m3(uint4 w, uint4 x0, uint4 x1, float acc) {
  const uint32_t wa[4] = {w.x, w.y, w.z, w.w};
  const uint32_t xa[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const float2 f = e4m3x2_to_float2(wa[i] >> (16 * half));
      const uint32_t x = xa[2 * i + half];
      acc = fmaf(f.x, __uint_as_float(x << 16), acc);
      acc = fmaf(f.y, __uint_as_float(x & 0xffff0000u), acc);
    }
  }
  return acc;
}

// d += A * B on the tensor cores: one m16n8k16 tile, bf16 inputs, fp32 accumulators. PTX fragments (lane = 4r + t):
// A rows r (a0, a2) and r + 8 (a1, a3), columns 2t, 2t + 1 (a0, a1) and + 8 (a2, a3); B rows (k) 2t, 2t + 1 (b0) and
// + 8 (b1), column r; d rows r (d0, d1) and r + 8 (d2, d3), columns 2t, 2t + 1.
__device__ __forceinline__ void mma_bf16_16816(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                               uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// (x0, x1) as two bf16x2 words that add up to it within ~16 mantissa bits (hi = bf16(x), lo = bf16(x - hi)): two
// MMAs, hi then lo, keep about the accuracy of the fp32 path for q and the probabilities.
__device__ __forceinline__ void split_bf16x2(float x0, float x1, uint32_t& hi, uint32_t& lo) {
  const uint16_t h0 = f2bf(x0), h1 = f2bf(x1);
  hi = uint32_t(h0) | (uint32_t(h1) << 16);
  lo = uint32_t(f2bf(x0 - bf2f(h0))) | (uint32_t(f2bf(x1 - bf2f(h1))) << 16);
}

// The tensor-core warp path's fragments (PTX mma.m16n8k16 / m16n8k8, lane = 4r + t). ldmatrix: lane l gives the
// address of row l % 8 of 8x8 bf16 tile l / 8; lane 4r + t receives, of each tile, row r's columns 2t, 2t + 1 (.trans:
// rows 2t, 2t + 1 of column r). volatile without a "memory" clobber: it stays after the block barrier that publishes
// the tiles (a side effect), but the o slots' loads and stores may move across it (they never alias the K / V
// buffers).
__device__ __forceinline__ void ldsm_x4(uint32_t* r, const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldsm_x4_trans(uint32_t* r, const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}
// A's rows r and r + 8 carry the hi and the lo bf16 halves of the same operand row (q's head r, P's head r),
// so one MMA does both halves and no A register is a zero: the caller adds D's rows r and r + 8.
// m16n8k8: a0 = row r at k 2t, 2t + 1, a1 = row r + 8; b0 = B rows 2t, 2t + 1 of column r; d0, d1 = row r at
// columns 2t, 2t + 1, d2, d3 = row r + 8.
__device__ __forceinline__ void mma_bf16_1688(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t b0) {
  asm("mma.sync.aligned.m16n8k8.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(b0));
}
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// (value, index) order of the argmax: larger value first, lower index on ties. NaN never wins.
__device__ __forceinline__ bool better(float v, int32_t i, float bv, int32_t bi) {
  return v > bv || (v == bv && i < bi);
}

__device__ __forceinline__ void warp_argmax(float& v, int32_t& i) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, v, o);
    const int32_t oi = __shfl_xor_sync(0xffffffffu, i, o);
    if (better(ov, oi, v, i)) {
      v = ov;
      i = oi;
    }
  }
}

// Block-wide sum in a fixed order (per-thread strided sums, warp butterflies, warp 0 adds the warps in order).
__device__ float block_sum(float v, float* red) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = warp_sum(v);
  __syncthreads();  // red may still be read by a previous reduction
  if (lane == 0) red[warp] = v;
  __syncthreads();
  if (warp == 0) {
    float s = lane < kWarps ? red[lane] : 0.f;
    s = warp_sum(s);
    if (lane == 0) red[kWarps] = s;
  }
  __syncthreads();
  return red[kWarps];
}

