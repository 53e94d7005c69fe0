// Emulator stand-in for csrc/kernels/common/cluster.cuh: the emulator runs one block at a time, so a block is its
// own cluster of one (rank 0; the barrier is the block's). Clusters of more blocks (CLUSTER > 1, MMA 2 and 3) are
// sm_90a hardware code that never reaches the emulator.
#pragma once

#include "emu_runtime.h"

namespace tunelab {
namespace cluster {

inline unsigned ctarank() { return 0; }
inline void sync() { emu::fail("barrier.cluster is not emulated (CLUSTER > 1: sm_90a only)"); }

}  // namespace cluster
}  // namespace tunelab
