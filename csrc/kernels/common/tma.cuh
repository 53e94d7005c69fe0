// Tensor Memory Accelerator loads (sm_90): one thread copies a whole 2-D box of a global matrix into shared memory,
// swizzled as the tensor map says, and the copy completes on an mbarrier by byte count (common/mbarrier.cuh).
//
// The tensor map (CUtensorMap, 128 bytes, 64-byte aligned) is encoded on the host by the driver
// (cuTensorMapEncodeTiled; csrc/core/tma_desc.h) and reaches the kernel inside its __grid_constant__ parameter
// block, whose generic address the copy takes. Rows and columns outside the global matrix are filled with zeros
// and still count towards the transaction bytes, so a box at a matrix edge needs no special case.
//
// The CPU emulator (tests/emulator/shim/common/tma.cuh) replaces this header.
#pragma once

namespace tunelab {
namespace tma {

// The opaque tensor map as it sits in a parameter block (same size and alignment as the driver's CUtensorMap).
struct alignas(64) Desc {
  unsigned long long words[16];
};

// L2 eviction policies for the copies' cache hints: data read once (a streamed corpus) goes first; data every
// block re-reads (the queries) stays.
__device__ __forceinline__ unsigned long long policy_evict_first() {
  unsigned long long p;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(p));
  return p;
}
__device__ __forceinline__ unsigned long long policy_evict_last() {
  unsigned long long p;
  asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;\n" : "=l"(p));
  return p;
}

// Fetches the tensor map into the constant cache ahead of the first copy.
__device__ __forceinline__ void prefetch(const Desc* desc) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<unsigned long long>(desc)) : "memory");
}

// Box at (column x, row y) of the map's matrix -> shared memory at dst (1024-byte aligned for SWIZZLE_128B),
// completing `bar`'s transaction count.
__device__ __forceinline__ void load_2d(unsigned dst, const Desc* desc, unsigned bar, int x, int y,
                                        unsigned long long policy) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
      " [%0], [%1, {%2, %3}], [%4], %5;\n" ::"r"(dst),
      "l"(reinterpret_cast<unsigned long long>(desc)), "r"(x), "r"(y), "r"(bar), "l"(policy)
      : "memory");
}

// Fetches the box at (column x, row y) into L2 only (no shared memory, no mbarrier): a later load_2d of it hits.
__device__ __forceinline__ void prefetch_2d(const Desc* desc, int x, int y) {
  asm volatile("cp.async.bulk.prefetch.tensor.2d.L2.global.tile [%0, {%1, %2}];\n" ::"l"(
                   reinterpret_cast<unsigned long long>(desc)),
               "r"(x), "r"(y)
               : "memory");
}

// load_2d to the same shared-memory offset of every block of the cluster in cta_mask (bit r: the block of rank r),
// completing each one's mbarrier at offset `bar` (thread-block clusters, sm_90a): one L2 read feeds them all.
__device__ __forceinline__ void load_2d_multicast(unsigned dst, const Desc* desc, unsigned bar, int x, int y,
                                                  unsigned short cta_mask, unsigned long long policy) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster.L2::cache_hint"
      " [%0], [%1, {%2, %3}], [%4], %5, %6;\n" ::"r"(dst),
      "l"(reinterpret_cast<unsigned long long>(desc)), "r"(x), "r"(y), "r"(bar), "h"(cta_mask), "l"(policy)
      : "memory");
}

}  // namespace tma
}  // namespace tunelab
