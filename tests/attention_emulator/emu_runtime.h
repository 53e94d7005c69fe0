// CPU emulation of the CUDA features the attention kernel uses, so that the kernel's own source
// (csrc/kernels/attention/fwd.cuh, smem_layout.cuh, params.cuh) can run on a machine without a GPU.
//
// Every CUDA thread is a fiber (ucontext), scheduled round-robin in one OS thread, so runs are
// deterministic. Warp collectives (ldmatrix, mma, shuffles, votes) rendezvous the 32 lanes of a warp;
// __syncthreads() rendezvous the block. Only the PTX-level helpers (shim/common/*.cuh) are replaced;
// their semantics follow the PTX ISA fragment layouts.
//
// Checks, besides the numbers: shared-memory races (two threads touching a byte in the same barrier
// interval, one of them writing), cp.async data read before it may have landed (destinations are
// poisoned with NaN at issue when copies land late), cp.async reads outside the registered global
// buffers, warps that diverge on a collective, and barrier/collective deadlocks.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#define __device__
#define __host__
#define __global__
#define __forceinline__ inline
#define __shared__
#define __align__(n) __attribute__((aligned(n)))
#define __launch_bounds__(...)
#define __grid_constant__

struct uint3_ {
  unsigned x, y, z;
};
struct float2 {
  float x, y;
};
struct float4 {
  float x, y, z, w;
};
struct uint4 {
  unsigned x, y, z, w;
};

inline float __int_as_float(int i) {
  float f;
  std::memcpy(&f, &i, 4);
  return f;
}
inline float __int_as_float(unsigned i) { return __int_as_float(static_cast<int>(i)); }
using std::fmaf;
using std::fmaxf;

namespace emu {

constexpr int kSmemCapacity = 256 * 1024;
extern unsigned char* smem_buffer;  // the kernel's extern shared array (defined by the driver)

void fail(const char* fmt, ...);

struct Thread;
Thread* cur();
const uint3_& thread_idx();
extern uint3_ block_idx, grid_dim;

void syncthreads();
float shfl_xor(float v, int mask);
bool vote_any(bool p);

// Warp rendezvous: every lane deposits `in` (up to 64 bytes) for collective `op`; `fn` then runs
// once per lane with all 32 inputs available.
void warp_collective(const char* op, const void* in, int in_bytes, const std::function<void(const unsigned char* const*)>& fn);

// shared-memory access bookkeeping (race detection); offsets are shared-window addresses
void note_smem_read(unsigned off, int bytes);
void note_smem_write(unsigned off, int bytes);

// cp.async
void cp_async(unsigned smem_off, const void* src, int bytes, bool pred);
void cp_async_commit();
void cp_async_wait(int n);

// global buffers the kernel may read through cp.async
void register_global(const void* p, size_t bytes);
void clear_globals();

struct LaunchStats {
  long long races = 0, poisoned_reads = 0, oob = 0;
};
extern LaunchStats stats;
extern bool land_late;  // true: cp.async lands at wait_group (poison until then); false: at issue

void launch(uint3_ grid, int threads, int smem_bytes, const std::function<void()>& kernel);

}  // namespace emu

#define threadIdx (emu::thread_idx())
#define blockIdx (emu::block_idx)
#define gridDim (emu::grid_dim)

inline void __syncthreads() { emu::syncthreads(); }
inline float __shfl_xor_sync(unsigned, float v, int mask) { return emu::shfl_xor(v, mask); }
inline bool __any_sync(unsigned, bool p) { return emu::vote_any(p); }
inline unsigned long long __cvta_generic_to_shared(const void* p) {
  return static_cast<unsigned long long>(static_cast<const unsigned char*>(p) - emu::smem_buffer);
}
