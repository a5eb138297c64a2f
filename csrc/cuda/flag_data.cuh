// Flag-in-data hand-offs (TILE_FLAG_HANDOFF, defined by decode_kernel_flags*.cu: the flag kernels, which TileRuntime
// picks per model): every scratch buffer element carries the step's epoch next to its
// value, written by one single-copy-atomic store, and a consumer polls the data words themselves instead of a
// counter. It removes, per dependent stage, the producer's release (block barrier + red.release: it waits for the
// tile's stores to be acknowledged) and one of the consumer's two L2 round trips (the counter, then the inputs).
// Included by waits.cuh (a part of decode_kernel.cuh), inside the kernel's anonymous namespace.
//
// Layout: the arena is twice the plan's scratch_bytes, every byte offset doubled, so an fp32 element becomes the
// 8-byte word {value bits, epoch} and a bf16 element the 4-byte word {value, epoch & 0xffff}. Each word has exactly
// one writer per step (the validator's single-producer rule), so a 4-byte word never mixes two tiles' stores even
// where two tiles' bf16 rows meet. A word matching the step's epoch holds this step's value: every element is
// rewritten every step, so a stale word is one or 65536k steps old and never matches (epochs start at 1, the arena
// at 0; the epoch is never reset while the arena lives: runtime.py allocates both together).
//
// Ordering: the value and its flag are one store, so no fence is needed for the hand-off itself. Writes outside the
// arena that a later step reads (the KV-cache rows of an ATTN tile) are ordered only by the data dependencies between
// them (a whole step apart), as in NCCL's LL protocol.
#pragma once

__device__ __forceinline__ uint64_t ld_relaxed_u64(const void* p) {
  uint64_t v;
  asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}

// Four 4-byte words (each single-copy atomic on its own, which is all a bf16 word needs).
__device__ __forceinline__ uint4 ld_relaxed_v4(const void* p) {
  uint4 v;
  asm volatile("ld.relaxed.gpu.global.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p)
               : "memory");
  return v;
}

__device__ __forceinline__ void st_flag_f32(float* buf, int64_t i, float v, uint32_t epoch) {
  const uint64_t w = (static_cast<uint64_t>(epoch) << 32) | __float_as_uint(v);
  asm volatile("st.relaxed.gpu.global.u64 [%0], %1;" ::"l"(reinterpret_cast<uint64_t*>(buf) + i), "l"(w) : "memory");
}

__device__ __forceinline__ void st_flag_bf16(uint16_t* buf, int64_t i, uint16_t v, uint32_t epoch) {
  const uint32_t w = (epoch << 16) | v;
  asm volatile("st.relaxed.gpu.global.u32 [%0], %1;" ::"l"(reinterpret_cast<uint32_t*>(buf) + i), "r"(w) : "memory");
}

__device__ __forceinline__ bool bf16_word_ok(uint32_t w, uint32_t epoch) { return (w >> 16) == (epoch & 0xffffu); }

// Set by any thread whose poll gave up (timeout raised, or another worker's error); read by run_tile after its last
// barrier, which then stops the worker. Zeroed at launch start.
__shared__ int g_fl_abort;
// The running tile and step, for the timeout's error words (thread 0 writes them as a tile starts; a timeout reads
// them p.timeout_ns later).
__shared__ int32_t g_fl_tile;
__shared__ int32_t g_fl_step;

// A poll's periodic check (every 16 rounds): true when it must give up; the timeout is raised here. Its bound is
// an eighth longer than a counter wait's: the counter waits left (EMBED's, the step boundary) are upstream of every
// poll, so when one of them is stuck, it, the root, reports first and the polls behind it see its error.
__device__ __noinline__ bool fl_gives_up(const KernelParams& p, uint64_t t0, uint32_t seen, uint32_t epoch) {
  if (ld_relaxed(p.state + kStateError) == 0u && global_ns() - t0 <= p.timeout_ns + (p.timeout_ns >> 3)) return false;
  if (ld_relaxed(p.state + kStateError) == 0u)
    raise_error(p, kErrorWaitTimeout, static_cast<int32_t>(blockIdx.x), g_fl_tile, g_fl_step, kFlagWaitCounter, seen,
                epoch);
  g_fl_abort = 1;
  return true;
}

// A poll's loads: relaxed, GPU scope, one width per element type.
__device__ __forceinline__ uint64_t ld_word(const uint64_t* a) { return ld_relaxed_u64(a); }
__device__ __forceinline__ uint32_t ld_word(const uint32_t* a) { return ld_relaxed(a); }
__device__ __forceinline__ uint4 ld_word(const uint4* a) { return ld_relaxed_v4(a); }
// The epoch bits a word carries (for the timeout's error words).
__device__ __forceinline__ uint32_t word_epoch(uint64_t u) { return static_cast<uint32_t>(u >> 32); }
__device__ __forceinline__ uint32_t word_epoch(uint32_t u) { return u >> 16; }
__device__ __forceinline__ uint32_t word_epoch(const uint4& u) { return u.x >> 16; }

// N words (idx < 0: skipped, reads `done`), all loads in flight before any check; then only the words not yet
// carrying the epoch (ok) are re-read, back to back, until all do or the poll gives up.
template <int N, typename Word, typename Ok>
__device__ __forceinline__ void fl_poll(const KernelParams& p, const Word* w, const int64_t (&idx)[N], Word done,
                                        uint32_t epoch, Ok ok, Word (&v)[N]) {
#pragma unroll
  for (int k = 0; k < N; ++k) v[k] = idx[k] >= 0 ? ld_word(w + idx[k]) : done;
  bool all = true;
#pragma unroll
  for (int k = 0; k < N; ++k) all &= ok(v[k]);
  if (all) return;
  const uint64_t t0 = global_ns();
  for (uint32_t iter = 1; !all; ++iter) {
#pragma unroll
    for (int k = 0; k < N; ++k)
      if (!ok(v[k])) v[k] = ld_word(w + idx[k]);
    all = true;
#pragma unroll
    for (int k = 0; k < N; ++k) all &= ok(v[k]);
    if (!all && (iter & 15u) == 0u && fl_gives_up(p, t0, word_epoch(v[0]), word_epoch(done))) return;
  }
}

// N elements of a flagged fp32 buffer (idx < 0: skipped, reads 0), polled until each carries `epoch`.
template <int N>
__device__ __forceinline__ void fl_read_f32(const KernelParams& p, const float* buf, const int64_t (&idx)[N],
                                            uint32_t epoch, float (&out)[N]) {
  uint64_t v[N];
  fl_poll(p, reinterpret_cast<const uint64_t*>(buf), idx, static_cast<uint64_t>(epoch) << 32, epoch,
          [&](uint64_t u) { return static_cast<uint32_t>(u >> 32) == epoch; }, v);
#pragma unroll
  for (int k = 0; k < N; ++k) out[k] = __uint_as_float(static_cast<uint32_t>(v[k]));
}

__device__ __forceinline__ float fl_get_f32(const KernelParams& p, const float* buf, int64_t i, uint32_t epoch) {
  const int64_t idx[1] = {i};
  float out[1];
  fl_read_f32<1>(p, buf, idx, epoch, out);
  return out[0];
}

// N elements of a flagged bf16 buffer (idx < 0: skipped, reads 0), as fl_read_f32.
template <int N>
__device__ __forceinline__ void fl_read_bf16(const KernelParams& p, const uint16_t* buf, const int64_t (&idx)[N],
                                             uint32_t epoch, uint16_t (&out)[N]) {
  uint32_t v[N];
  fl_poll(p, reinterpret_cast<const uint32_t*>(buf), idx, epoch << 16, epoch,
          [&](uint32_t u) { return bf16_word_ok(u, epoch); }, v);
#pragma unroll
  for (int k = 0; k < N; ++k) out[k] = static_cast<uint16_t>(v[k] & 0xffffu);
}

// N chunks of 8 bf16 elements (chunk c = elements 8c .. 8c+7; c < 0: skipped, reads 0) of a flagged bf16 buffer,
// packed as the plain buffer's 16-byte chunks: two 16-byte loads per chunk (each 4-byte word atomic on its own).
template <int N>
__device__ __forceinline__ void fl_read_bf16x8(const KernelParams& p, const uint16_t* buf, const int32_t (&chunk)[N],
                                               uint32_t epoch, uint4 (&out)[N]) {
  int64_t idx[2 * N];  // flagged chunk c = 16-byte words 2c, 2c + 1
#pragma unroll
  for (int k = 0; k < N; ++k) {
    idx[2 * k] = chunk[k] >= 0 ? 2 * int64_t(chunk[k]) : -1;
    idx[2 * k + 1] = chunk[k] >= 0 ? 2 * int64_t(chunk[k]) + 1 : -1;
  }
  const uint32_t d = epoch << 16;
  uint4 v[2 * N];
  fl_poll(p, reinterpret_cast<const uint4*>(buf), idx, make_uint4(d, d, d, d), epoch,
          [&](const uint4& u) {
            return bf16_word_ok(u.x, epoch) && bf16_word_ok(u.y, epoch) && bf16_word_ok(u.z, epoch) &&
                   bf16_word_ok(u.w, epoch);
          },
          v);
#pragma unroll
  for (int k = 0; k < N; ++k) {
    const uint4 a = v[2 * k], b = v[2 * k + 1];
    out[k].x = (a.x & 0xffffu) | (a.y << 16);
    out[k].y = (a.z & 0xffffu) | (a.w << 16);
    out[k].z = (b.x & 0xffffu) | (b.y << 16);
    out[k].w = (b.z & 0xffffu) | (b.w << 16);
  }
}
