// CPU emulation of the CUDA features the kernels use, so that their own source (csrc/kernels/attention/*.cuh,
// csrc/kernels/similarity/*.cuh with the real smem_layout.cuh and params.cuh) runs without a GPU. One runtime
// shared by tests/attention_emulator and tests/similarity_emulator; each family keeps its own driver and the
// shims only it needs (attention: common/math.cuh; similarity: similarity/ptx.cuh); the shared shims
// (common/mma.cuh, common/cp_async.cuh) live in tests/emulator/shim.
// Covers warp-synchronous shared-memory use (the race detector orders accesses by block barriers *and* by
// __syncwarp within a warp; kernels without __syncwarp are ordered by barriers alone), shuffles, votes,
// ballots, __syncthreads_or/count, tf32 MMA; named barriers, mbarriers and TMA copies (sm_90, numbers only).
//
// Every CUDA thread is a fiber (ucontext) scheduled round-robin in one OS thread. Warp collectives rendezvous
// the 32 lanes; __syncthreads rendezvous the block. Checked besides the numbers: shared-memory races (two
// threads touch a 4-byte word, one writes, and neither a barrier nor - within a warp - a __syncwarp orders
// them), cp.async data read before it may have landed (destinations read as NaN until the issuing thread's
// wait_group), cp.async sources outside the registered global buffers, warps diverging on a collective,
// deadlocks, threads passing different numbers of barriers. The schedule is round-robin, or with EMU_SCHED_SEED set
// (not 0) one where warps fall asleep for a few rounds at random, so that they drift apart as on a GPU.
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
inline float __uint_as_float(unsigned i) {
  float f;
  std::memcpy(&f, &i, 4);
  return f;
}
inline unsigned __float_as_uint(float f) {
  unsigned u;
  std::memcpy(&u, &f, 4);
  return u;
}
// One rounded IEEE operation each, never contracted into an FMA (as the device intrinsics of the same names).
inline float __fmul_rn(float a, float b) {
  volatile float r = a * b;
  return r;
}
inline float __fadd_rn(float a, float b) {
  volatile float r = a + b;
  return r;
}
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
using std::fmaf;
using std::fmaxf;
using std::fminf;
using std::sqrt;
inline float sqrtf(float x) { return std::sqrt(x); }

namespace emu {

constexpr int kSmemCapacity = 256 * 1024;
extern unsigned char* smem_buffer;

[[noreturn]] void fail(const char* fmt, ...);

const uint3_& thread_idx();
extern uint3_ block_idx, grid_dim;
int lane();

void syncthreads();
int syncthreads_reduce(int pred, int op);  // op 0: count, 1: or, 2: and
void syncwarp();
bool vote_any(bool p);

// Warp rendezvous: every lane deposits `in` (up to 64 bytes) for collective `op`; `fn` then runs once per
// lane with all 32 inputs available.
void warp_collective(const char* op, const void* in, int in_bytes,
                     const std::function<void(const unsigned char* const*)>& fn);

// shared-memory access bookkeeping (race detection); offsets are shared-window byte addresses
void note_smem_read(unsigned off, int bytes);
void note_smem_write(unsigned off, int bytes);
// A 4-byte shared atomic: unordered against other atomics on the word, a race against unordered plain accesses.
void note_smem_atomic(unsigned off);

void cp_async(unsigned smem_off, const void* src, int bytes, bool pred);
void cp_async_commit();
void cp_async_wait(int n);

// sm_90 synchronization (the search's TMA producer, MMA 2 and 3). Named barriers (bar.sync id, count): `count`
// threads rendezvous on barrier `id`; op 0 returns how many passed `pred`, op 1 whether any did. mbarriers live at a
// shared-memory offset: init sets the arrivals a phase needs; arrive adds one arrival and `tx_bytes` expected
// transaction bytes; complete_tx retires bytes (a TMA copy's); a phase completes when every arrival and byte is in;
// wait(parity) returns once the phase of that parity has completed (the current phase's parity differs).
// The race detector orders accesses by block barriers and __syncwarp only, so a launch that uses these runs with
// races_unchecked set (its numbers, bounds, deadlocks and barrier counts are still checked).
int named_barrier(int id, int count, int pred, int op);
void mbar_init(unsigned off, unsigned count);
void mbar_arrive(unsigned off, unsigned tx_bytes);
void mbar_complete_tx(unsigned off, unsigned bytes);
void mbar_wait(unsigned off, unsigned parity);
extern bool races_unchecked;

void register_global(const void* p, size_t bytes);
void clear_globals();

struct LaunchStats {
  long long races = 0, poisoned_reads = 0, oob = 0, smem_reads = 0, smem_writes = 0;
};
extern LaunchStats stats;
extern bool land_late;  // true: cp.async lands at wait_group (NaN until then); false: at issue

void launch(uint3_ grid, int threads, int smem_bytes, const std::function<void()>& kernel);

}  // namespace emu

#define threadIdx (emu::thread_idx())
#define blockIdx (emu::block_idx)
#define gridDim (emu::grid_dim)

inline void __syncthreads() { emu::syncthreads(); }
inline int __syncthreads_or(int p) { return emu::syncthreads_reduce(p != 0, 1); }
inline int __syncthreads_count(int p) { return emu::syncthreads_reduce(p != 0, 0); }
inline void __syncwarp(unsigned = 0xffffffffu) { emu::syncwarp(); }
inline unsigned long long __cvta_generic_to_shared(const void* p) {
  return static_cast<unsigned long long>(static_cast<const unsigned char*>(p) - emu::smem_buffer);
}
inline bool __any_sync(unsigned, bool p) { return emu::vote_any(p); }
inline int __popc(unsigned v) { return __builtin_popcount(v); }

template <class T>
inline T emu_shfl(T v, int src_lane, const char* op) {
  static_assert(sizeof(T) == 4, "32-bit shuffles");
  T out{};
  const int l = emu::lane();
  int src = src_lane;
  struct In {
    T v;
    int src;
  } in{v, src};
  emu::warp_collective(op, &in, sizeof(In), [&](const unsigned char* const* all) {
    const In& mine = *reinterpret_cast<const In*>(all[l]);
    const int s = mine.src & 31;
    out = reinterpret_cast<const In*>(all[s])->v;
  });
  return out;
}
template <class T>
inline T __shfl_sync(unsigned, T v, int src) {
  return emu_shfl(v, src, "shfl");
}
template <class T>
inline T __shfl_xor_sync(unsigned, T v, int mask) {
  return emu_shfl(v, emu::lane() ^ mask, "shfl");
}
inline unsigned __ballot_sync(unsigned, int p) {
  int v = p != 0;
  unsigned out = 0;
  emu::warp_collective("ballot", &v, 4, [&](const unsigned char* const* all) {
    for (int l = 0; l < 32; ++l)
      if (*reinterpret_cast<const int*>(all[l])) out |= 1u << l;
  });
  return out;
}
