// Hopper warpgroup MMA (wgmma, sm_90a only): both operands read by the tensor cores straight from shared memory
// through 64-bit matrix descriptors, issued asynchronously by the 4 warps of a warpgroup together.
//
// Layout handled here: K-major tiles (rows of 128 bytes = 64 fp16/bf16 elements along the reduction dimension)
// in the 128-byte swizzle that SmemRowLayout<128, 1> writes: 16-byte chunk c of row r sits at chunk c ^ (r % 8),
// i.e. address bits [4:6] ^= bits [7:9], which is the hardware's SWIZZLE_128B when the tile starts on a
// 1024-byte boundary (descriptor: desc_k_sw128() in common/wgmma_desc.cuh). The k16 step s of a row slice starts
// 32 * s bytes further: the swizzle is applied to the final address, so advancing the start address is all it
// takes.
//
// Ordering rules the callers follow (PTX ISA 9.7.15): wgmma_fence() before the first wgmma and after any other
// instruction wrote the accumulators; commit() closes a group; wait<N>() returns when at most N groups are
// pending, after which the accumulators may be read. Shared memory written by ordinary stores or cp.async must
// be made visible to the async proxy (fence_proxy_async()) before a barrier that precedes the wgmma reading it.
// fence_operands() keeps the compiler from moving accumulator registers across these points (what CUTLASS's
// warpgroup_fence_operand does).
//
// The CPU emulator (tests/emulator/shim/common/wgmma.cuh) replaces this header.
#pragma once

#include "common/wgmma_desc.cuh"

namespace tunelab {
namespace wg {

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

template <int MT, int NT>
__device__ __forceinline__ void fence_operands(float (&acc)[MT][NT][4]) {
#pragma unroll
  for (int m = 0; m < MT; ++m)
#pragma unroll
    for (int n = 0; n < NT; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) asm volatile("" : "+f"(acc[m][n][e])::"memory");
}

}  // namespace wg
}  // namespace tunelab

#include "common/wgmma_ops.cuh"
