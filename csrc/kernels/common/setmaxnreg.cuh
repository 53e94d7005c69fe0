// Warpgroup register reconfiguration (sm_90a): a warp-specialized kernel launches with the same register count
// for every thread (what ptxas reports, bounded by 65536 / threads), then its producer warpgroup gives registers
// back and its MMA warpgroups take them (FlashAttention-3 and CUTLASS do the same). Every warp of a warpgroup must
// execute the same instruction; the counts are multiples of 8 in 24..256, and the CTA's total must stay within
// what it was launched with. ptxas allocates the code after an increase up to the new count.
//
// The CPU emulator (tests/emulator/shim/common/setmaxnreg.cuh) replaces this header with no-ops.
#pragma once

namespace tunelab {
namespace wg {

template <int N>
__device__ __forceinline__ void regs_dec() {
  static_assert(N % 8 == 0 && N >= 24 && N <= 256, "setmaxnreg: a multiple of 8 in 24..256");
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}
template <int N>
__device__ __forceinline__ void regs_inc() {
  static_assert(N % 8 == 0 && N >= 24 && N <= 256, "setmaxnreg: a multiple of 8 in 24..256");
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}

}  // namespace wg
}  // namespace tunelab
