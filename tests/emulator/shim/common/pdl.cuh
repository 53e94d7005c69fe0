// Emulator stand-in for csrc/kernels/common/pdl.cuh: the emulator runs one kernel at a time.
#pragma once

namespace tunelab {
namespace pdl {

inline void wait_primary() {}
inline void launch_dependents() {}

}  // namespace pdl
}  // namespace tunelab
