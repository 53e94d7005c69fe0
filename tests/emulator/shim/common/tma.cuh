// Emulator stand-in for csrc/kernels/common/tma.cuh: TMA copies are not emulated (see shim common/mbarrier.cuh).
#pragma once

#include "emu_runtime.h"

namespace tunelab {
namespace tma {

struct alignas(64) Desc {
  unsigned long long words[16];
};
inline unsigned long long policy_evict_first() { emu::fail("createpolicy is not emulated (MMA=2: sm_90a only)"); }
inline unsigned long long policy_evict_last() { emu::fail("createpolicy is not emulated (MMA=2: sm_90a only)"); }
inline void prefetch(const Desc*) { emu::fail("prefetch.tensormap is not emulated"); }
inline void load_2d(unsigned, const Desc*, unsigned, int, int, unsigned long long) {
  emu::fail("cp.async.bulk.tensor is not emulated (MMA=2: sm_90a only)");
}

inline void prefetch_2d(const Desc*, int, int) {
  emu::fail("cp.async.bulk.prefetch.tensor is not emulated (PREFETCH > 0: sm_90a only)");
}
inline void load_2d_multicast(unsigned, const Desc*, unsigned, int, int, unsigned short, unsigned long long) {
  emu::fail("cp.async.bulk.tensor multicast is not emulated (CLUSTER > 1: sm_90a only)");
}

}  // namespace tma
}  // namespace tunelab
