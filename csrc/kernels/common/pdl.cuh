// Programmatic dependent launch (sm_90): a kernel launched with the programmatic-serialization attribute (the
// core's LaunchDims::programmatic) may be scheduled while the kernel before it on the stream still runs, so its
// launch latency overlaps that kernel's tail. It must call wait_primary() before it touches anything the earlier
// kernel writes or reads: that waits until the earlier grid has completed and its memory is visible. The earlier
// kernel may call launch_dependents() to let the dependent grid be scheduled before all of its blocks exit.
// Both are no-ops below sm_90 and in a kernel launched without the attribute.
//
// The CPU emulator (tests/emulator/shim/common/pdl.cuh) replaces this header with no-ops.
#pragma once

namespace tunelab {
namespace pdl {

__device__ __forceinline__ void wait_primary() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

__device__ __forceinline__ void launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

}  // namespace pdl
}  // namespace tunelab
