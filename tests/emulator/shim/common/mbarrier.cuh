// Emulator stand-in for csrc/kernels/common/mbarrier.cuh: mbarriers (phases by arrivals and transaction bytes) and
// named barriers, on the runtime's fibers (emu_runtime.h). Arrivals on another block of a cluster are not emulated
// (the emulator runs one block at a time: CLUSTER > 1 is sm_90a hardware code).
#pragma once

#include "emu_runtime.h"

namespace tunelab {
namespace mbar {

inline void init(unsigned bar, unsigned count) {
  emu::races_unchecked = true;  // the race detector orders accesses by block barriers only (emu_runtime.h)
  emu::mbar_init(bar, count);
}
inline void fence_init() {}
inline void arrive_expect_tx(unsigned bar, unsigned bytes) { emu::mbar_arrive(bar, bytes); }
inline void arrive(unsigned bar) { emu::mbar_arrive(bar, 0); }
inline void arrive_cluster(unsigned, unsigned) { emu::fail("remote mbarrier.arrive is not emulated (CLUSTER > 1)"); }
inline void wait(unsigned bar, unsigned parity) { emu::mbar_wait(bar, parity); }
inline void named_sync(int id, int threads) {
  emu::races_unchecked = true;
  emu::named_barrier(id, threads, 0, 0);
}
inline bool named_sync_or(int id, int threads, bool pred) {
  emu::races_unchecked = true;
  return emu::named_barrier(id, threads, pred ? 1 : 0, 1) != 0;
}

}  // namespace mbar
}  // namespace tunelab
