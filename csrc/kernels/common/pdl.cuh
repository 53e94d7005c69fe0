// Programmatic dependent launch (PDL, sm_90): a kernel launched with programmatic stream serialization
// (LaunchDims::programmatic) may start before the kernel ahead of it in the stream has finished, once every block of
// that kernel has called pdl_launch_dependents() or exited. It must call pdl_wait_prior_grid() before it reads what
// that kernel wrote: the wait returns once the prior grid has completed and its memory operations are visible.
// Both are no-ops in a kernel launched without PDL, and compile to nothing below sm_90 and in the CPU emulator.
#pragma once

namespace tunelab {

__device__ __forceinline__ void pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

__device__ __forceinline__ void pdl_wait_prior_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

}  // namespace tunelab
