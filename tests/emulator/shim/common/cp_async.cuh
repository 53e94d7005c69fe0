// Emulator stand-in for csrc/kernels/common/cp_async.cuh (shared by both emulators; emu::cp_async checks
// alignment, bounds and the source range).
#pragma once
#include "emu_runtime.h"

namespace tunelab {

template <int BYTES>
inline void cp_async(unsigned smem_addr, const void* gmem, bool pred) {
  static_assert(BYTES == 4 || BYTES == 8 || BYTES == 16, "cp.async copies 4, 8 or 16 bytes");
  emu::cp_async(smem_addr, gmem, BYTES, pred);
}
inline void cp_async_commit() { emu::cp_async_commit(); }
template <int N>
inline void cp_async_wait() {
  emu::cp_async_wait(N);
}

}  // namespace tunelab
