// Emulator stand-in for csrc/kernels/common/tma.cuh: 2-D TMA loads of 16-bit matrices with the 128-byte swizzle,
// from a tensor map the emulator's driver encodes (encode_2d_16bit below, in place of the driver's
// cuTensorMapEncodeTiled). A load lands when issued: it writes the whole box (zeros outside the matrix, as the
// hardware fills them) and retires its bytes on the mbarrier. L2 policies and prefetches mean nothing here;
// multicast (CLUSTER > 1) is not emulated.
#pragma once

#include <cstring>

#include "emu_runtime.h"

namespace tunelab {
namespace tma {

struct alignas(64) Desc {
  unsigned long long words[16];
};

// The emulator's tensor map, inside a Desc.
struct EmuMap {
  const unsigned char* base;
  long long rows, cols, row_stride_bytes;
  int box_rows, box_cols;
};
static_assert(sizeof(EmuMap) <= sizeof(Desc), "the emulator's tensor map fits the descriptor");

// The row-major 16-bit matrix of rows x cols elements at base, rows row_stride_bytes apart, read in boxes of
// box_rows x box_cols elements (box_cols * 2 == 128: one swizzle row per box row).
inline Desc encode_2d_16bit(const void* base, long long rows, long long cols, long long row_stride_bytes,
                            int box_rows, int box_cols) {
  if (box_cols * 2 != 128) emu::fail("TMA box of %d 16-bit columns: the emulator models 128-byte rows", box_cols);
  if (box_rows <= 0 || box_rows > 256) emu::fail("TMA box of %d rows: 1..256 expected", box_rows);
  Desc d{};
  const EmuMap m{static_cast<const unsigned char*>(base), rows, cols, row_stride_bytes, box_rows, box_cols};
  std::memcpy(&d, &m, sizeof m);
  return d;
}

inline unsigned long long policy_evict_first() { return 0; }
inline unsigned long long policy_evict_last() { return 0; }
inline void prefetch(const Desc*) {}
inline void prefetch_2d(const Desc*, int, int) {}

// Box at (column x, row y) -> shared memory at dst (1024-byte aligned), swizzled: byte address bits [4:6] ^= bits
// [7:9] (the wgmma shim's SWIZZLE_128B); then its bytes complete on the mbarrier at `bar`.
inline void load_2d(unsigned dst, const Desc* desc, unsigned bar, int x, int y, unsigned long long) {
  EmuMap m;
  std::memcpy(&m, desc, sizeof m);
  if (dst % 1024) emu::fail("TMA destination %u is not 1024-byte aligned (SWIZZLE_128B)", dst);
  const int bytes = m.box_rows * m.box_cols * 2;
  for (int r = 0; r < m.box_rows; ++r) {
    for (int c = 0; c < m.box_cols; ++c) {
      const unsigned linear = static_cast<unsigned>(r) * 128u + static_cast<unsigned>(c) * 2u;
      const unsigned at = dst + (linear ^ (((linear >> 7) & 7u) << 4));
      const long long gr = static_cast<long long>(y) + r, gc = static_cast<long long>(x) + c;
      unsigned short v = 0;
      if (gr >= 0 && gr < m.rows && gc >= 0 && gc < m.cols)
        std::memcpy(&v, m.base + gr * m.row_stride_bytes + gc * 2, 2);
      emu::note_smem_write(at, 2);
      std::memcpy(emu::smem_buffer + at, &v, 2);
    }
  }
  emu::mbar_complete_tx(bar, static_cast<unsigned>(bytes));
}

inline void load_2d_multicast(unsigned, const Desc*, unsigned, int, int, unsigned short, unsigned long long) {
  emu::fail("cp.async.bulk.tensor multicast is not emulated (CLUSTER > 1: sm_90a only)");
}

}  // namespace tma
}  // namespace tunelab
