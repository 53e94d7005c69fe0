// Emulator stand-in for csrc/kernels/common/mbarrier.cuh. The emulator does not model mbarriers or named barriers
// (the search's MMA=2 main loop, their only user, is sm_90a hardware code checked by the GPU tests): every entry
// point fails the run, so a config that reaches one is reported instead of silently mis-emulated.
#pragma once

#include "emu_runtime.h"

namespace tunelab {
namespace mbar {

inline void init(unsigned, unsigned) { emu::fail("mbarrier.init is not emulated (MMA=2 runs on sm_90a only)"); }
inline void fence_init() { emu::fail("fence.mbarrier_init is not emulated"); }
inline void arrive_expect_tx(unsigned, unsigned) { emu::fail("mbarrier.arrive.expect_tx is not emulated"); }
inline void arrive(unsigned) { emu::fail("mbarrier.arrive is not emulated"); }
inline void arrive_cluster(unsigned, unsigned) { emu::fail("remote mbarrier.arrive is not emulated"); }
inline void wait(unsigned, unsigned) { emu::fail("mbarrier.try_wait is not emulated"); }
inline void named_sync(int, int) { emu::fail("bar.sync with a thread count is not emulated"); }
inline bool named_sync_or(int, int, bool) { emu::fail("bar.red.or is not emulated"); }

}  // namespace mbar
}  // namespace tunelab
