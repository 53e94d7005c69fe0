// Shared-memory layouts for row-major tiles whose rows are ROW_BYTES long (a multiple of 64 bytes),
// addressed in 16-byte chunks (one cp.async.cg / one ldmatrix row).
//
// MODE 0, plain: rows back to back. A ldmatrix phase reads one 16-byte chunk from 8 consecutive rows;
//   with a 128-byte (or multiple) pitch they all land in the same 4 banks: 8-way conflicts at D>=64,
//   4-way at D=32/96. Kept as the honest "off" setting.
// MODE 1, XOR swizzle: in each 128-byte group of 8 chunks, chunk c of row r is stored at c ^ (r & 7),
//   so the 8 rows of a ldmatrix phase hit 8 different bank quads. Rows of 64 bytes (D=32), and the
//   trailing half group of a 192-byte row (D=96), pair rows into one 128-byte line and use
//   c ^ ((r >> 1) & 3) instead. Conflict-free for ldmatrix, cp.async 16-byte writes (2-way at D=96) and
//   the 4-byte epilogue writes; no padding, so it costs no shared memory.
// MODE 2, padded: pitch ROW_BYTES + 16, which also makes ldmatrix conflict-free at the price of 16 bytes
//   per row (and 2-way conflicts on D=32 cp.async writes).
// Row offsets that are multiples of 16 rows leave the swizzle key unchanged, which the fragment
// address helpers below rely on to fold tile/fragment offsets into immediates.
#pragma once

namespace tunelab {

template <int ROW_BYTES, int MODE>
struct SmemRowLayout {
  static_assert(ROW_BYTES % 64 == 0, "rows must be a multiple of 64 bytes (32 16-bit elements)");
  static_assert(MODE >= 0 && MODE <= 2, "layout mode: 0 plain, 1 xor swizzle, 2 padded");
  static constexpr int kChunks = ROW_BYTES / 16;
  static constexpr int kPitch = ROW_BYTES + (MODE == 2 ? 16 : 0);
  static constexpr int kFullGroupChunks = (kChunks / 8) * 8;  // chunks covered by whole 8-chunk groups

  __device__ static __forceinline__ int chunk(int row, int c) {
    if constexpr (MODE != 1) {
      return c;
    } else {
      if (kChunks % 8 == 0 || c < kFullGroupChunks) return c ^ (row & 7);
      return c ^ ((row >> 1) & 3);
    }
  }

  // Byte offset of byte `col` (0..ROW_BYTES-1) of row `row`; sub-chunk bytes keep their position.
  __device__ static __forceinline__ int offset(int row, int col) {
    return row * kPitch + (chunk(row, col >> 4) << 4) + (col & 15);
  }
};

// Per-lane address generator for ldmatrix over a SmemRowLayout tile. A lane reads, for every
// fragment, the 16-byte chunk 2*pair + h of row (lane_row + const_rows), where h (0/1) and lane_row
// are fixed per lane. Since 2*pair + h == (2*pair) ^ h, the swizzled chunk is (2*pair) ^ (h ^ key),
// so the lane-dependent part is computed once and each fragment costs at most one XOR with a
// constant (none when the layout is not swizzled).
template <class Layout, int MODE>
struct LdsmLaneAddr {
  unsigned row_base;  // byte offset of the lane's row start within the tile
  int x_full;         // ((h ^ key8) << 4), or (h << 4) when not swizzled
  int x_half;         // ((h ^ key4) << 4) for the 64-byte / trailing-half-group pattern

  __device__ __forceinline__ void init(int lane_row, int h) {
    row_base = static_cast<unsigned>(lane_row * Layout::kPitch);
    if constexpr (MODE == 1) {
      x_full = (h ^ (lane_row & 7)) << 4;
      x_half = (h ^ ((lane_row >> 1) & 3)) << 4;
    } else {
      x_full = h << 4;
      x_half = h << 4;
    }
  }

  // Returns a copy the compiler must treat as unknown. Calling it once per main-loop iteration keeps
  // the per-fragment addresses (one per k-step) from being hoisted out of the loop, where each would
  // pin a register for the whole kernel; recomputing them costs one or two integer ops per ldmatrix.
  __device__ __forceinline__ LdsmLaneAddr opaque() const {
    LdsmLaneAddr r = *this;
    asm volatile("" : "+r"(r.row_base), "+r"(r.x_full), "+r"(r.x_half));
    return r;
  }

  // Offset of the lane's chunk (2*pair + h) in row (lane_row + row_add), row_add a multiple of 16.
  __device__ __forceinline__ unsigned at(int row_add, int pair) const {
    const unsigned row = row_base + static_cast<unsigned>(row_add * Layout::kPitch);
    if constexpr (MODE == 1) {
      if (Layout::kChunks % 8 == 0 || 2 * pair < Layout::kFullGroupChunks)
        return row + static_cast<unsigned>(x_full ^ (pair << 5));
      return row + static_cast<unsigned>(x_half ^ (pair << 5));
    } else {
      return row + static_cast<unsigned>(x_full + (pair << 5));
    }
  }
};

}  // namespace tunelab
