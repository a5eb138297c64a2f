// What would a fused gate/up + down tile's split-K reduction cost at the end of its stage? (docs/design/fused-mlp.md)
// Today the GATEUP stage ends with each worker storing its ~62 bf16 outputs and releasing a counter, and DOWN waits for
// all of them. Fused, each worker would instead add its fp32 partial of all 2048 outputs into a shared accumulator, as
// int64 fixed point (integer adds commute: the sum is the same in any order, so runs stay bit-identical), and the
// next stage waits for all of them. This probe measures that epilogue against today's, on 132 blocks of 512 threads:
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a scripts/reduce_probe.cu -o /tmp/reduce_probe
//   /tmp/reduce_probe
// Each round: a grid barrier; every block issues `stage` bytes of cp.async copies from a 1 GB buffer (the next
// stage's staging, in flight in the kernel at that moment: the poll probe showed that it delays every L2 round trip)
// or none; block b then waits (b % 8) x 150 ns (workers end a stage ~1 us apart), stamps, and runs the mode's
// epilogue; its thread 0 then fences, releases the stage counter and polls it until every block's release is in,
// and stamps when it sees that. Reported per mode, median / p90 over rounds: from the last block's epilogue start
// to the median block seeing the stage complete (the hand-off as the next stage sees it), and one block's own
// epilogue up to its release. The int64 mode's sums are checked against their exact value at the end.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdint>
#include <vector>

#include "probe_check.cuh"
#include "probe_ptx.cuh"

constexpr int kThreads = 512;
constexpr int kOut = 2048;          // Llama-3.2-1B's hidden size: the down projection's outputs
constexpr int kRowsPerBlock = 62;   // 8192 / 132: one worker's gate/up rows (today's GATEUP outputs)
constexpr int kMaxStage = 128 * 1024;
constexpr size_t kWeightBytes = size_t(1) << 30;

enum Epilogue { kSignalOnly, kStoreRows, kRedU64, kRedF32, kRedV4F32, kStorePartials };
const char* const kNames[] = {"signal only", "62 bf16 stores (today)", "2048 red.add.u64 (fixed point)",
                              "2048 red.add.f32 (order-dependent)", "512 red.add.v4.f32 (order-dependent)",
                              "2048 f32 stores to own slot (no reduction)"};

__device__ __forceinline__ void red_u64(unsigned long long* a, unsigned long long v) {
  asm volatile("red.relaxed.gpu.global.add.u64 [%0], %1;" ::"l"(a), "l"(v) : "memory");
}
__device__ __forceinline__ void red_f32(float* a, float v) {
  asm volatile("red.relaxed.gpu.global.add.f32 [%0], %1;" ::"l"(a), "f"(v) : "memory");
}
__device__ __forceinline__ void red_v4f32(float* a, float4 v) {
  asm volatile("red.relaxed.gpu.global.add.v4.f32 [%0], {%1, %2, %3, %4};" ::"l"(a), "f"(v.x), "f"(v.y), "f"(v.z),
               "f"(v.w)
               : "memory");
}

__global__ void __launch_bounds__(kThreads, 1)
    probe(uint32_t* bar, uint32_t* ctr, uint64_t* out, const uint8_t* weights, unsigned long long* acc, float* accf,
          float* slots, uint16_t* rows, int mode, int stage, int rounds, uint32_t bar_base, uint32_t ctr_base) {
  extern __shared__ __align__(128) uint8_t sm[];
  const int tid = threadIdx.x, G = gridDim.x, b = blockIdx.x;
  const size_t per_round = size_t(G) * kMaxStage;
  for (int r = 0; r < rounds; ++r) {
    grid_barrier(bar, bar_base + uint32_t(r + 1) * G);
    if (stage > 0) {
      const uint8_t* src = weights + (size_t(r) * per_round) % (kWeightBytes - per_round) + size_t(b) * kMaxStage;
      for (int off = tid * 16; off < stage; off += kThreads * 16) cp16(sm + off, src + off);
      cp_commit();
    }
    const uint64_t t0 = now_ns();
    while (now_ns() - t0 < uint64_t(b % 8) * 150) {
    }
    uint64_t* o = out + (size_t(r) * G + b) * 3;
    if (tid == 0) o[0] = now_ns();
    switch (mode) {
      case kStoreRows:
        if (tid < kRowsPerBlock) rows[b * kRowsPerBlock + tid] = static_cast<uint16_t>(r + tid);
        break;
      case kRedU64:  // partial (b + 1) * (i + 1) of output i, as an exact integer
        for (int i = tid; i < kOut; i += kThreads) red_u64(acc + i, (unsigned long long)(b + 1) * (i + 1));
        break;
      case kRedF32:
        for (int i = tid; i < kOut; i += kThreads) red_f32(accf + i, 1.0f);
        break;
      case kRedV4F32:
        if (tid < kOut / 4) red_v4f32(accf + 4 * tid, make_float4(1.f, 1.f, 1.f, 1.f));
        break;
      case kStorePartials:
        for (int i = tid; i < kOut; i += kThreads) slots[size_t(b) * kOut + i] = float(r);
        break;
      default:
        break;
    }
    __syncthreads();
    if (tid == 0) {
      __threadfence();
      release_add(ctr);
      o[1] = now_ns();
      const uint32_t want = ctr_base + uint32_t(r + 1) * G;
      while (static_cast<int32_t>(ld_acquire(ctr) - want) < 0) {
      }
      o[2] = now_ns();
    }
    asm volatile("cp.async.wait_all;" ::: "memory");
    __syncthreads();
  }
}

int main() {
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const int rounds = 200, skip = 20;
  uint32_t *bar, *ctr;
  uint64_t* out;
  uint8_t* weights;
  unsigned long long* acc;
  float *accf, *slots;
  uint16_t* rows;
  CK(cudaMalloc(&bar, 4));
  CK(cudaMalloc(&ctr, 4));
  CK(cudaMemset(bar, 0, 4));
  CK(cudaMemset(ctr, 0, 4));
  CK(cudaMalloc(&out, size_t(rounds) * sms * 3 * 8));
  CK(cudaMalloc(&weights, kWeightBytes));
  CK(cudaMemset(weights, 1, kWeightBytes));
  CK(cudaMalloc(&acc, kOut * 8));
  CK(cudaMalloc(&accf, kOut * 4));
  CK(cudaMalloc(&slots, size_t(sms) * kOut * 4));
  CK(cudaMalloc(&rows, size_t(sms) * kRowsPerBlock * 2));
  CK(cudaFuncSetAttribute(probe, cudaFuncAttributeMaxDynamicSharedMemorySize, kMaxStage));
  std::vector<uint64_t> h(size_t(rounds) * sms * 3);
  uint32_t bar_base = 0, ctr_base = 0;
  int bad = 0;
  printf("us, median / p90 over %d rounds: last block's epilogue start -> median block sees the stage complete; "
         "one block's epilogue up to its release\n", rounds - skip);
  for (int stage : {0, 65536}) {
    printf("\nstaging in flight per SM: %d KB\n%-44s %18s %18s\n", stage / 1024, "epilogue", "hand-off",
           "own epilogue");
    for (int mode = kSignalOnly; mode <= kStorePartials; ++mode) {
      CK(cudaMemset(acc, 0, kOut * 8));
      probe<<<sms, kThreads, kMaxStage>>>(bar, ctr, out, weights, acc, accf, slots, rows, mode, stage, rounds,
                                          bar_base, ctr_base);
      CK(cudaDeviceSynchronize());
      bar_base += uint32_t(rounds) * sms;
      ctr_base += uint32_t(rounds) * sms;
      CK(cudaMemcpy(h.data(), out, h.size() * 8, cudaMemcpyDeviceToHost));
      std::vector<double> handoff, own;
      for (int r = skip; r < rounds; ++r) {
        const uint64_t* hr = h.data() + size_t(r) * sms * 3;
        uint64_t last_start = 0;
        std::vector<double> seen;
        for (int b = 0; b < sms; ++b) {
          last_start = std::max(last_start, hr[3 * b]);
          own.push_back((double(hr[3 * b + 1]) - double(hr[3 * b])) / 1e3);
        }
        for (int b = 0; b < sms; ++b) seen.push_back((double(hr[3 * b + 2]) - double(last_start)) / 1e3);
        std::sort(seen.begin(), seen.end());
        handoff.push_back(seen[seen.size() / 2]);
      }
      std::sort(handoff.begin(), handoff.end());
      std::sort(own.begin(), own.end());
      printf("%-44s %8.2f / %7.2f %8.2f / %7.2f\n", kNames[mode], handoff[handoff.size() / 2],
             handoff[handoff.size() * 9 / 10], own[own.size() / 2], own[own.size() * 9 / 10]);
      if (mode == kRedU64) {  // every output's sum is exact: rounds x sum over blocks of (b + 1) * (i + 1)
        std::vector<unsigned long long> a(kOut);
        CK(cudaMemcpy(a.data(), acc, kOut * 8, cudaMemcpyDeviceToHost));
        const unsigned long long blocks = (unsigned long long)sms * (sms + 1) / 2;
        for (int i = 0; i < kOut; ++i)
          if (a[i] != (unsigned long long)rounds * blocks * (i + 1)) ++bad;
      }
    }
  }
  printf("\nint64 sums exact: %s\n", bad ? "NO" : "yes");
  return bad ? 1 : 0;
}
