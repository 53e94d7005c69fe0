// Thread-block clusters (sm_90): the rank of this block in its cluster and the barrier of all the cluster's
// threads. Blocks of a cluster run at the same time on one GPC and can reach each other's shared memory
// (mbarrier arrivals through mapa, TMA multicast: common/mbarrier.cuh, common/tma.cuh).
//
// The CPU emulator (tests/emulator/shim/common/cluster.cuh) replaces this header.
#pragma once

namespace tunelab {
namespace cluster {

__device__ __forceinline__ unsigned ctarank() {
  unsigned r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
  return r;
}
// Every thread of every block of the cluster arrives and waits (release / acquire: shared-memory writes before it,
// mbarrier initializations included, are visible to the cluster after it). Every thread of the block must call it.
__device__ __forceinline__ void sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\n"
               "barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}

}  // namespace cluster
}  // namespace tunelab
