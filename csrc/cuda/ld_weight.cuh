// The weight-stream load: 16 bytes through the read-only path without allocating in L1 (the data is read once).
// Shared by the decode kernel (device_helpers.cuh includes it inside its namespace) and the benchmark's read sweep
// (read_sweep.cu), so that the floor is measured with the kernel's own instruction. No includes: it compiles in
// whichever namespace includes it. Its signature is part of the kernel's code generation (a const void* parameter
// changes the counter kernel's SASS).
#pragma once

__device__ __forceinline__ uint4 ld_weight(const uint16_t* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}
