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
