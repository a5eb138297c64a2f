// The device probes' (scripts/*_probe.cu: single-file programs built with plain nvcc) check of a CUDA runtime call
// in main(): print the error with its place and return 1.
#pragma once
#include <cstdio>

#include <cuda_runtime.h>

#define CK(x)                                                                         \
  do {                                                                                \
    cudaError_t e_ = (x);                                                             \
    if (e_ != cudaSuccess) {                                                          \
      printf("CUDA error %s at %s:%d\n", cudaGetErrorString(e_), __FILE__, __LINE__); \
      return 1;                                                                       \
    }                                                                                 \
  } while (0)

// The best time (ms) of `reps` launches, the first not counted (warm-up): prep() runs untimed before each (a counter
// reset), launch() between two events. Both return a cudaError_t. Returns 0, or 1 after printing a CUDA error.
template <class Prep, class Launch>
int best_ms(int reps, Prep prep, Launch launch, float* best) {
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  *best = 1e9f;
  for (int r = 0; r < reps; ++r) {
    CK(prep());
    CK(cudaEventRecord(e0));
    CK(launch());
    CK(cudaEventRecord(e1));
    CK(cudaEventSynchronize(e1));
    CK(cudaGetLastError());
    float ms = 0.f;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    if (r > 0 && ms < *best) *best = ms;
  }
  CK(cudaEventDestroy(e0));
  CK(cudaEventDestroy(e1));
  return 0;
}
