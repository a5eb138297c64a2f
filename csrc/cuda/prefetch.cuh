// L2 prefetch of a tile's weights (the runtime-options kernel's experiments; the default variant compiles it out). Part
// of the decode kernel: decode_kernel.cu includes it inside its anonymous namespace (tiles::cuda), after waits.cuh.
#pragma once

// ---------------------------------------------------------------------------------------------------------------
// Prefetch: weights (and the KV rows of an attention tile) into L2; fire-and-forget, never waits.
// ---------------------------------------------------------------------------------------------------------------
__device__ void prefetch_range(const void* base, int64_t bytes, int64_t cap) {
  if (bytes > cap) bytes = cap;
  bytes &= ~int64_t(15);
  const char* b = static_cast<const char*>(base);
  const int lane = threadIdx.x & 31;
  constexpr int64_t kPiece = 16384;
  for (int64_t off = int64_t(lane) * kPiece; off < bytes; off += 32 * kPiece) {
    const int64_t n = bytes - off < kPiece ? bytes - off : kPiece;
    prefetch_l2(b + off, static_cast<uint32_t>(n));
  }
}

// kOptPrefetchAfterAttn (warp 0): the first `cap` bytes of a matvec tile's rows (of each matrix) into L2. The same
// ranges as prefetch_tile's matvec case with no skip; one helper for both changed the register allocation (spills)
// of the ring and PollPrefetch instantiations (ptxas, session 4), so the few lines stand twice.
__device__ void prefetch_rows(const KernelParams& p, const Tile& t, int64_t cap) {
  const int64_t cols = weight_cols(p, t.weight);
  const int64_t bytes = int64_t(t.row_end - t.row_begin) * cols * 2;
  prefetch_range(p.weights[t.weight] + int64_t(t.row_begin) * cols, bytes, cap);
  if (t.op == kOpGateup) prefetch_range(p.weights[t.weight2] + int64_t(t.row_begin) * cols, bytes, cap);
}

// Called by warp 0 only. Compiled out of the default variant, which launch_decode runs only with the prefetch off
// (the default with staged weights): its ~2300 never-executed instructions sat between the hot code of the tile
// loop (perf log v35).
__device__ void prefetch_tile(const KernelParams& p, const Tile& t, int64_t pos) {
#ifndef TILES_DEFAULT_VARIANT
  const int64_t cap = p.prefetch_bytes;
  if (cap <= 0) return;
  switch (t.op) {
    case kOpQkv:
    case kOpResid:
    case kOpGateup:
    case kOpLmhead: {
      const int64_t cols = weight_cols(p, t.weight);
      int64_t rows = t.row_end - t.row_begin, skip = 0;
      if ((OPT(p) & kOptStageWeights) && (OPT(p) & kOptPrefetchPastStage) && cols / 8 <= 32 * kUnroll) {
        // The staged first batches cover whole rows here (no k-split beyond one batch): rows of the first
        // kWarps units are in shared memory already, so the prefetch window starts after them.
        const int64_t units = t.op == kOpGateup ? rows : (rows + 1) / 2;
        const int64_t staged_units = units < kWarps ? units : kWarps;
        skip = t.op == kOpGateup ? staged_units : 2 * staged_units;
        if (skip > rows) skip = rows;
      }
      rows -= skip;
      prefetch_range(p.weights[t.weight] + (t.row_begin + skip) * cols, rows * cols * 2, cap);
      if (t.op == kOpGateup)
        prefetch_range(p.weights[t.weight2] + (t.row_begin + skip) * cols, rows * cols * 2, cap);
      break;
    }
    case kOpAttn: {
      int32_t lo, hi;
      attn_partition_range(static_cast<int32_t>(pos + 1), t.aux1, p.h.attn_partitions, p.h.attn_granule,
                           p.h.attn_single, &lo, &hi);
      if (hi > lo) {
        const int64_t hd = p.h.head_dim;
        const int64_t off = (int64_t(t.aux0) * p.max_cache_len + lo) * hd;
        prefetch_range(p.k_cache[t.layer] + off, int64_t(hi - lo) * hd * 2, cap);
        prefetch_range(p.v_cache[t.layer] + off, int64_t(hi - lo) * hd * 2, cap);
      }
      break;
    }
    default:
      break;
  }
#endif
}

