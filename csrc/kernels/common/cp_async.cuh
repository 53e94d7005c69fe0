// Asynchronous global->shared copies (sm_80+) and the group bookkeeping around them.
#pragma once

namespace tunelab {

// Copies BYTES (4, 8 or 16) from global to shared memory without passing through registers.
// When pred is false nothing is read and the destination is zero-filled (src-size 0): tiles that run
// past the end of a sequence become zeros, so stale shared memory (possibly NaN bit patterns from an
// earlier tile) can never leak into a product. 16-byte copies use .cg (cache in L2 only: K/V tiles are
// reused across CTAs through L2, not L1); .cg only exists for 16 bytes, narrower copies use .ca.
template <int BYTES>
__device__ __forceinline__ void cp_async(unsigned smem_addr, const void* gmem, bool pred) {
  static_assert(BYTES == 4 || BYTES == 8 || BYTES == 16, "cp.async copies 4, 8 or 16 bytes");
  const int src_bytes = pred ? BYTES : 0;
  if constexpr (BYTES == 16) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr), "l"(gmem), "r"(src_bytes)
                 : "memory");
  } else {
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" ::"r"(smem_addr), "l"(gmem), "n"(BYTES),
                 "r"(src_bytes)
                 : "memory");
  }
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }

// Waits until at most N of this thread's committed groups are still in flight. Other threads' copies
// become visible only after a barrier that follows the wait.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  static_assert(N >= 0, "cp.async.wait_group takes a non-negative count");
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

}  // namespace tunelab
