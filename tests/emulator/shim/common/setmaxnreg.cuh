// Emulator stand-in for csrc/kernels/common/setmaxnreg.cuh: register counts mean nothing on the CPU.
#pragma once

namespace tunelab {
namespace wg {

template <int N>
inline void regs_dec() {}
template <int N>
inline void regs_inc() {}

}  // namespace wg
}  // namespace tunelab
