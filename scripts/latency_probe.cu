// Loaded-latency probe (scripts/latency_probe.py builds it with nvcc into a shared library and calls it by ctypes):
// how long one dependent L2 round trip (the kind every stage hand-off and every RMSNorm input read is made of) takes
// while every SM streams weights with a given number of bytes in flight. perf-log v6 suggests that the bytes in
// flight beyond the bandwidth-delay product only add queueing latency; this measures the curve
// (bytes in flight per SM -> read bandwidth, L2 round trip) that decides how deep the kernel should stream.
//
// One block of 512 threads per SM (as the decode kernel). Warps 0..14 stream a private slice of a large buffer
// with 16-byte ld.global.nc loads, U loads per lane issued before use (U x 7.5 KB in flight per SM). Warp 15's
// lane 0 walks a dependent chain of ld.acquire.gpu loads through a small L2-resident table and records the mean
// time per load (%globaltimer) until the streaming warps are done. With quiet_mod > 0, every quiet_mod-th block
// streams nothing and only times: its round trips see the other SMs' traffic but not its own, which separates
// queueing in the SM's own load path from queueing in L2 / the crossbar.
#include <cuda_runtime.h>
#include <stdint.h>

#include "probe_ptx.cuh"

namespace {

constexpr int kThreads = 512;
constexpr int kStreamWarps = kThreads / 32 - 1;
constexpr int kChain = 16;          // dependent loads per latency sample
constexpr int kTableWords = 1024;   // per-block chase table (4 KB, stays in L2)
constexpr int kMaxSamples = 4096;

// The decode kernel's ld_weight / ld_acquire / global_ns are the instructions of probe_ptx.cuh's ldnc / ld_acquire /
// now_ns; the kernel keeps its own copies (moving them into a shared header changed its register allocation: ptxas
// 96 -> 136 B stack, 12/20 -> 64/120 B spills, 2026-11-30; such changes cost 1-3%, docs/perf-log.md v7).
// Quiet blocks (every quiet_mod-th; none when quiet_mod <= 0) stream nothing and only time round trips.
__host__ __device__ inline bool quiet_block(int b, int quiet_mod) { return quiet_mod > 0 && b % quiet_mod == 0; }
inline int quiet_blocks(int blocks, int quiet_mod) { return quiet_mod > 0 ? (blocks + quiet_mod - 1) / quiet_mod : 0; }

template <int U>
__global__ void __launch_bounds__(kThreads, 1)
    probe_kernel(const uint4* __restrict__ buf, int64_t chunks_per_block, int passes, const uint32_t* table,
                 float* lat_ns, int* nsamples, uint32_t* sink, int quiet_mod, int* gdone, int busy_warps) {
  __shared__ int done;
  const bool quiet = quiet_block(blockIdx.x, quiet_mod);
  if (threadIdx.x == 0) done = 0;
  __syncthreads();
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  if (warp < kStreamWarps) {
    uint32_t acc = 0;
    if (U > 0 && !quiet) {
      const uint4* base = buf + blockIdx.x * chunks_per_block;
      const int64_t step = int64_t(kStreamWarps) * 32 * U;
      for (int pass = 0; pass < passes; ++pass) {
        for (int64_t c = int64_t(warp) * 32 * U + lane; c + (U - 1) * 32 < chunks_per_block; c += step) {
          uint4 v[U > 0 ? U : 1];
#pragma unroll
          for (int u = 0; u < U; ++u) v[u] = ldnc(base + c + u * 32);
#pragma unroll
          for (int u = 0; u < U; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
          // The next batch's address depends on this batch's data (the added term is always 0: the buffer is
          // memset to 0x01, so every chunk XORs to 0), so no compiler can issue it before this batch has returned.
          // Without it the loads ran batches ahead and U did not bound the bytes in flight (4.0 TB/s at U = 1).
          c += acc == 0x9e3779b9u;
        }
      }
    }
    if (acc == 0x9e3779b9u) sink[blockIdx.x] = acc;  // keeps the loads alive
    __syncwarp();
    if (lane == 0) {
      atomicAdd(&done, 1);
      if (!quiet) atomicAdd(gdone, 1);  // quiet blocks time until every streaming warp of the grid is done
    }
  } else if (lane == 0) {
    const uint32_t* t = table + blockIdx.x * kTableWords;
    uint32_t idx = 0;
    int n = 0;
    float* out = lat_ns + int64_t(blockIdx.x) * kMaxSamples;
    // U == 0: no streaming; take a fixed number of samples of the idle latency.
    while (n < kMaxSamples && (U == 0 ? n < 256
                                      : quiet ? atomicAdd(gdone, 0) < busy_warps
                                              : atomicAdd(&done, 0) < kStreamWarps)) {
      const uint64_t t0 = now_ns();
#pragma unroll 1
      for (int k = 0; k < kChain; ++k) idx = ld_acquire(t + (idx & (kTableWords - 1)));
      const uint64_t t1 = now_ns();
      out[n++] = float(t1 - t0) / kChain;
    }
    nsamples[blockIdx.x] = n;
    if (idx == 0xffffffffu) sink[blockIdx.x] = idx;
  }
}

template <int U>
cudaError_t launch(int blocks, const uint4* buf, int64_t cpb, int passes, const uint32_t* table, float* lat,
                   int* ns, uint32_t* sink, int quiet_mod, int* gdone) {
  cudaMemset(gdone, 0, sizeof(int));
  probe_kernel<U><<<blocks, kThreads>>>(buf, cpb, passes, table, lat, ns, sink, quiet_mod, gdone,
                                        (blocks - quiet_blocks(blocks, quiet_mod)) * kStreamWarps);
  return cudaGetLastError();
}

}  // namespace

// Runs the probe with U loads in flight per lane (0, 1, 2, 4, 8 or 16) on `blocks` blocks, each streaming
// `bytes_per_block` bytes `passes` times (quiet blocks: see the kernel). Returns 0 and fills: bandwidth (bytes
// streamed / kernel time, TB/s), the median and the 90th percentile of the per-load latency samples of the streaming
// blocks (ns), the sample count, and the median of the quiet blocks' samples (-1 without quiet blocks). Else an error.
extern "C" int probe_run(int U, int blocks, long long bytes_per_block, int passes, int quiet_mod, double* bw_tbs,
                         double* lat_med_ns, double* lat_p90_ns, int* samples, double* quiet_med_ns) {
  const int64_t cpb = bytes_per_block / 16;
  uint4* buf = nullptr;
  uint32_t *table = nullptr, *sink = nullptr;
  float* lat = nullptr;
  int* ns = nullptr;
  int* gdone = nullptr;
  cudaError_t e = cudaMalloc(&buf, size_t(cpb) * 16 * blocks);
  if (e == cudaSuccess) e = cudaMalloc(&table, size_t(blocks) * kTableWords * 4);
  if (e == cudaSuccess) e = cudaMalloc(&sink, size_t(blocks) * 4);
  if (e == cudaSuccess) e = cudaMalloc(&lat, size_t(blocks) * kMaxSamples * 4);
  if (e == cudaSuccess) e = cudaMalloc(&ns, size_t(blocks) * 4);
  if (e == cudaSuccess) e = cudaMalloc(&gdone, sizeof(int));
  if (e != cudaSuccess) return 1000 + int(e);
  cudaMemset(buf, 1, size_t(cpb) * 16 * blocks);
  // Chase table: word i holds (i * 17 + 5) % kTableWords, a single cycle through the table's lines.
  {
    uint32_t* h = new uint32_t[size_t(blocks) * kTableWords];
    for (int b = 0; b < blocks; ++b)
      for (int i = 0; i < kTableWords; ++i) h[size_t(b) * kTableWords + i] = (i * 17 + 5) % kTableWords;
    cudaMemcpy(table, h, size_t(blocks) * kTableWords * 4, cudaMemcpyHostToDevice);
    delete[] h;
  }
  cudaEvent_t s, t;
  cudaEventCreate(&s);
  cudaEventCreate(&t);
  auto run = [&]() -> cudaError_t {
    switch (U) {
      case 0: return launch<0>(blocks, buf, cpb, passes, table, lat, ns, sink, quiet_mod, gdone);
      case 1: return launch<1>(blocks, buf, cpb, passes, table, lat, ns, sink, quiet_mod, gdone);
      case 2: return launch<2>(blocks, buf, cpb, passes, table, lat, ns, sink, quiet_mod, gdone);
      case 4: return launch<4>(blocks, buf, cpb, passes, table, lat, ns, sink, quiet_mod, gdone);
      case 8: return launch<8>(blocks, buf, cpb, passes, table, lat, ns, sink, quiet_mod, gdone);
      case 16: return launch<16>(blocks, buf, cpb, passes, table, lat, ns, sink, quiet_mod, gdone);
      default: return cudaErrorInvalidValue;
    }
  };
  e = run();  // warm-up (also faults the table into L2)
  if (e == cudaSuccess) e = cudaDeviceSynchronize();
  cudaEventRecord(s);
  if (e == cudaSuccess) e = run();
  cudaEventRecord(t);
  if (e == cudaSuccess) e = cudaEventSynchronize(t);
  float ms = 0.f;
  cudaEventElapsedTime(&ms, s, t);
  int rc = e == cudaSuccess ? 0 : 2000 + int(e);
  if (rc == 0) {
    const int busy = blocks - quiet_blocks(blocks, quiet_mod);
    *bw_tbs = U == 0 ? 0.0 : double(cpb) * 16 * busy * passes / (ms * 1e-3) / 1e12;
    int* hn = new int[blocks];
    float* hl = new float[size_t(blocks) * kMaxSamples];
    cudaMemcpy(hn, ns, size_t(blocks) * 4, cudaMemcpyDeviceToHost);
    cudaMemcpy(hl, lat, size_t(blocks) * kMaxSamples * 4, cudaMemcpyDeviceToHost);
    // Gather and select (a simple counting pass over 10 ns bins up to 100 us is enough here).
    constexpr int kBins = 10000;
    long long* hist = new long long[2 * kBins]();  // [busy | quiet]
    long long total[2] = {0, 0};
    for (int b = 0; b < blocks; ++b) {
      const int q = quiet_block(b, quiet_mod) ? 1 : 0;
      for (int i = 0; i < hn[b]; ++i) {
        int bin = int(hl[size_t(b) * kMaxSamples + i] / 10.f);
        hist[q * kBins + (bin < kBins ? bin : kBins - 1)]++;
        ++total[q];
      }
    }
    double qp90 = -1;
    *lat_med_ns = *lat_p90_ns = *quiet_med_ns = -1;
    for (int q = 0; q < 2; ++q) {
      double* med = q ? quiet_med_ns : lat_med_ns;
      double* p90 = q ? &qp90 : lat_p90_ns;
      long long acc = 0;
      for (int i = 0; i < kBins && total[q] > 0; ++i) {
        acc += hist[q * kBins + i];
        if (*med < 0 && acc * 2 >= total[q]) *med = i * 10.0 + 5;
        if (*p90 < 0 && acc * 10 >= total[q] * 9) *p90 = i * 10.0 + 5;
      }
    }
    *samples = int(total[0]);
    delete[] hist;
    delete[] hn;
    delete[] hl;
  }
  cudaFree(buf);
  cudaFree(table);
  cudaFree(sink);
  cudaFree(lat);
  cudaFree(ns);
  cudaFree(gdone);
  cudaEventDestroy(s);
  cudaEventDestroy(t);
  return rc;
}
