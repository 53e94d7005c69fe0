// Emulator stand-in for csrc/kernels/common/wgmma.cuh (and its generated wgmma_ops.cuh): warpgroup MMAs with
// both operands in shared memory, decoded from the matrix descriptors as the PTX ISA specifies (K-major,
// SWIZZLE_128B: byte address bits [4:6] ^= bits [7:9]; 8-row groups `stride byte offset` apart).
//
// Asynchrony is modelled: an MMA is only recorded when issued; wait<N>() executes the groups older than the N
// newest, in the issuing thread, reading shared memory *then* (the reads go to the race detector at that point).
// A kernel that refills a stage while an MMA group reading it is still pending therefore computes with the new
// data (or NaN: cp.async destinations read as NaN until they land) and races, as it would on the GPU.
// Each thread computes its own accumulator elements (row 16 * (warp % 4) + g (+8), columns 8 j + 2 t (+1)).
#pragma once
#include <map>
#include <vector>

#include "common/mma.cuh"
#include "common/wgmma_desc.cuh"  // the kernels' own encoder (not shimmed)
#include "emu_runtime.h"

namespace tunelab {
namespace wg {

namespace detail {
struct Op {
  float* d;  // the thread's accumulators, float[nt][4] flattened
  int nt;
  unsigned long long a, b;
  int dtype;
};
struct ThreadState {
  std::vector<Op> open;                   // issued since the last commit
  std::vector<std::vector<Op>> pending;   // committed groups, oldest first
};
inline std::map<unsigned, ThreadState>& states() {
  static std::map<unsigned, ThreadState> s;
  return s;
}
inline ThreadState& mine() {
  const uint3_& t = emu::thread_idx();
  return states()[t.x + 1024u * (emu::block_idx.x + 4096u * emu::block_idx.y)];
}

// Byte address of element (row, k) of a K-major SWIZZLE_128B operand described by desc (16-bit elements).
inline unsigned element_addr(unsigned long long desc, int row, int k) {
  const unsigned start = static_cast<unsigned>(desc & 0x3FFFu) << 4;
  const unsigned sbo = static_cast<unsigned>((desc >> 32) & 0x3FFFu) << 4;
  const unsigned base_offset = static_cast<unsigned>((desc >> 49) & 7u);
  const unsigned layout = static_cast<unsigned>(desc >> 62);
  if (layout != 1u) emu::fail("wgmma descriptor layout type %u: the emulator models SWIZZLE_128B (1) only", layout);
  if (base_offset != 0u) emu::fail("wgmma descriptor base offset %u: tiles must start on 1024-byte boundaries", base_offset);
  if (sbo != 1024u) emu::fail("wgmma descriptor stride byte offset %u: 8 rows x 128 bytes = 1024 expected", sbo);
  const unsigned linear = start + static_cast<unsigned>(row / 8) * sbo + static_cast<unsigned>(row % 8) * 128u +
                          static_cast<unsigned>(k) * 2u;
  return linear ^ (((linear >> 7) & 7u) << 4);
}

inline float load(unsigned addr, int dtype) {
  emu::note_smem_read(addr, 2);
  const uint16_t h = emu_detail::smem_u16(addr);
  return dtype == kFp16 ? emu_detail::half_to_float(h) : emu_detail::bf16_to_float(h);
}

inline void execute(const Op& op) {
  const int tid = static_cast<int>(emu::thread_idx().x);
  const int lane = tid & 31, quarter = (tid >> 5) & 3, g = lane >> 2, t = lane & 3;
  for (int j = 0; j < op.nt; ++j) {
    for (int e = 0; e < 4; ++e) {
      const int row = 16 * quarter + g + 8 * (e >> 1);
      const int col = 8 * j + 2 * t + (e & 1);
      double acc = op.d[4 * j + e];
      for (int k = 0; k < 16; ++k)
        acc += static_cast<double>(load(element_addr(op.a, row, k), op.dtype)) *
               static_cast<double>(load(element_addr(op.b, col, k), op.dtype));
      op.d[4 * j + e] = static_cast<float>(acc);
    }
  }
}
}  // namespace detail

inline void wgmma_fence() {}
inline void fence_proxy_async() {}
template <int MT, int NT>
inline void fence_operands(float (&)[MT][NT][4]) {}

inline void commit() {
  auto& s = detail::mine();
  s.pending.push_back(s.open);
  s.open.clear();
}

template <int N>
inline void wait() {
  auto& s = detail::mine();
  if (!s.open.empty()) emu::fail("wgmma.wait_group with %d MMAs issued but not committed", static_cast<int>(s.open.size()));
  while (static_cast<int>(s.pending.size()) > N) {
    for (const auto& op : s.pending.front()) detail::execute(op);
    s.pending.erase(s.pending.begin());
  }
}

template <int NT>
inline void wgmma_m64k16_f16(float (&d)[NT][4], unsigned long long a, unsigned long long b) {
  detail::mine().open.push_back({&d[0][0], NT, a, b, kFp16});
}
template <int NT>
inline void wgmma_m64k16_bf16(float (&d)[NT][4], unsigned long long a, unsigned long long b) {
  detail::mine().open.push_back({&d[0][0], NT, a, b, kBf16});
}

}  // namespace wg
}  // namespace tunelab
