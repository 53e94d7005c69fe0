// Shared-memory barriers of a warp-specialized pipeline (sm_90): transaction-counting mbarriers, which a TMA copy
// completes by byte count and consumers wait on by phase parity, and named barriers for a subset of the block's
// warps (the consumers; the producer warp never joins them).
//
// Phase protocol (PTX ISA 9.7.13.15): a barrier initialized with count C completes its current phase when C
// arrivals have been made and every expected transaction byte has landed; the phase bit then flips. A waiter
// for the j-th completion (j = 0, 1, ...) waits with parity j & 1. init() must be followed by fence_init() and a
// barrier of every thread that uses it before its first use.
//
// The CPU emulator (tests/emulator/shim/common/mbarrier.cuh) replaces this header.
#pragma once

namespace tunelab {
namespace mbar {

__device__ __forceinline__ void init(unsigned bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
// Makes initialized barriers visible to the other threads and to the async proxy (the TMA unit).
__device__ __forceinline__ void fence_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
// One arrival that also announces `bytes` of transactions (the TMA copies issued next) for the current phase.
__device__ __forceinline__ void arrive_expect_tx(unsigned bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void arrive(unsigned bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// One arrival on the mbarrier at shared-memory offset `bar` of the cluster's block of rank `cta` (mapa gives its
// address in the cluster window). The default .release.cta semantics, as CUTLASS's ClusterBarrier::arrive: the
// arrival hands a stage back to a TMA producer, after the arriving warp's wgmma reads of it have completed, and
// needs no cluster-scope fence.
__device__ __forceinline__ void arrive_cluster(unsigned bar, unsigned cta) {
  asm volatile(
      "{\n .reg .b32 remote;\n"
      " mapa.shared::cluster.u32 remote, %0, %1;\n"
      " mbarrier.arrive.shared::cluster.b64 _, [remote];\n}\n" ::"r"(bar),
      "r"(cta)
      : "memory");
}
// Returns once the phase with parity `parity` has completed (the try_wait suspends for a system-dependent time
// before failing, so the loop does not spin hot).
__device__ __forceinline__ void wait(unsigned bar, unsigned parity) {
  asm volatile(
      "{\n .reg .pred done;\n"
      "WAIT_%=:\n"
      " mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      " @!done bra WAIT_%=;\n}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}

// Named barrier `id` (1..15; 0 is __syncthreads) over `threads` threads (a multiple of 32): every warp that joins
// must pass the same count.
__device__ __forceinline__ void named_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
// named_sync that also returns whether any joining thread passed pred = true (__syncthreads_or for a subset).
__device__ __forceinline__ bool named_sync_or(int id, int threads, bool pred) {
  int out;
  asm volatile(
      "{\n .reg .pred p, q;\n setp.ne.b32 p, %3, 0;\n"
      " bar.red.or.pred q, %1, %2, p;\n"
      " selp.b32 %0, 1, 0, q;\n}\n"
      : "=r"(out)
      : "r"(id), "r"(threads), "r"(static_cast<int>(pred))
      : "memory");
  return out != 0;
}

}  // namespace mbar
}  // namespace tunelab
