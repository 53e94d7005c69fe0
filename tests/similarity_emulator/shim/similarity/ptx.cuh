// Emulator stand-in for csrc/kernels/similarity/ptx.cuh: same API; lds/sts feed the race detector.
#pragma once
#include "emu_runtime.h"
#include "common/mma.cuh"

namespace tunelab {
namespace sim {

inline float f32_inf() { return INFINITY; }
inline float f32_nan() { return __int_as_float(0x7fffffff); }

template <class T>
inline T lds(const T* p) {
  static_assert(sizeof(T) == 4, "32-bit shared accesses");
  emu::note_smem_read(static_cast<unsigned>(__cvta_generic_to_shared(p)), 4);
  return *p;
}
template <class T>
inline void sts(T* p, T v) {
  static_assert(sizeof(T) == 4, "32-bit shared accesses");
  emu::note_smem_write(static_cast<unsigned>(__cvta_generic_to_shared(p)), 4);
  *p = v;
}

// Atomics order among themselves; a plain access racing one is still a race (emu::note_smem_atomic).
inline int atomic_add_shared(int* p, int v) {
  emu::note_smem_atomic(static_cast<unsigned>(__cvta_generic_to_shared(p)));
  const int old = *p;  // fibers switch only at collectives and barriers: the read-modify-write is atomic
  *p = old + v;
  return old;
}

inline float4 lds4(const float* p) {
  const unsigned off = static_cast<unsigned>(__cvta_generic_to_shared(p));
  if (off % 16) emu::fail("lds4: shared address %u is not 16-byte aligned", off);
  emu::note_smem_read(off, 16);
  float4 v;
  std::memcpy(&v, p, 16);
  return v;
}

// The dense search's key stores: plain stores here (the GPU build's L2 policy experiment has no meaning on the CPU).
inline unsigned long long key_store_policy() { return 0; }
inline void store_key(float* a, float v, unsigned long long) { *a = v; }

// MERGE=6's global words: the raise and the loads are plain (one OS thread). The reset is none: the emulator runs
// the blocks one after another, so a block's reset at its start would erase the words of every block before it,
// where on the GPU a wave's blocks all reset before any raises one. The driver zero-fills the words before the
// launch instead, and later blocks then filter by earlier blocks' bars.
inline void global_bar_raise(unsigned* a, unsigned v) { *a = *a > v ? *a : v; }
inline unsigned global_bar_load(const unsigned* a) { return *a; }
inline uint4 global_words_load4(const unsigned* a) {
  if (reinterpret_cast<uintptr_t>(a) % 16) emu::fail("global_words_load4: address %p is not 16-byte aligned", a);
  return uint4{a[0], a[1], a[2], a[3]};
}
inline void global_words_reset4(unsigned*) {}
inline void global_count_release_add(unsigned* a) { *a += 1u; }
inline unsigned global_count_acquire(const unsigned* a) { return *a; }
inline void spin_pause_ns(unsigned) {}
// A clock that advances 1 us a read, for the ping-pong first tiles' bounded wait: the emulator runs one block at a
// time, so a block's count holds the first tiles of the blocks before it and none after, and where those fall short
// of the wait's share the wait gives up after a few reads (kFilterWaitNs).
inline unsigned long long spin_clock_ns() {
  static unsigned long long t = 0;
  return t += 1000;
}

// cvt.rna.tf32.f32: round the magnitude to 10 mantissa bits, ties away from zero.
inline unsigned to_tf32(float x) {
  unsigned u = __float_as_uint(x);
  if ((u & 0x7f800000u) == 0x7f800000u) return u;  // inf / NaN unchanged
  return (u + 0x1000u) & 0xffffe000u;
}

// m16n8k8 tf32: the MMA reads the top 19 bits of each operand; products and sums in double.
inline void mma_tf32_m16n8k8(float (&c)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
  struct In {
    unsigned a[4], b[2];
  } in{{a[0], a[1], a[2], a[3]}, {b0, b1}};
  const int lane = emu::lane();
  emu::warp_collective("mma.tf32", &in, sizeof(In), [&](const unsigned char* const* all) {
    double A[16][8], B[8][8];
    auto tf = [](unsigned r) { return static_cast<double>(__uint_as_float(r & 0xffffe000u)); };
    for (int l = 0; l < 32; ++l) {
      const In& x = *reinterpret_cast<const In*>(all[l]);
      const int g = l >> 2, t = l & 3;
      A[g][t] = tf(x.a[0]);
      A[g + 8][t] = tf(x.a[1]);
      A[g][t + 4] = tf(x.a[2]);
      A[g + 8][t + 4] = tf(x.a[3]);
      B[t][g] = tf(x.b[0]);
      B[t + 4][g] = tf(x.b[1]);
    }
    const int g = lane >> 2, t = lane & 3;
    const int rows[4] = {g, g, g + 8, g + 8}, cols[4] = {2 * t, 2 * t + 1, 2 * t, 2 * t + 1};
    for (int e = 0; e < 4; ++e) {
      double acc = c[e];
      for (int k = 0; k < 8; ++k) acc += A[rows[e]][k] * B[k][cols[e]];
      c[e] = static_cast<float>(acc);
    }
  });
}

template <int DTYPE>
inline void unpack2(unsigned v, float& lo, float& hi) {
  lo = emu_detail::to_float<DTYPE>(static_cast<uint16_t>(v & 0xffff));
  hi = emu_detail::to_float<DTYPE>(static_cast<uint16_t>(v >> 16));
}

// The diagnosis builds' clock: not emulated (the emulator builds no timeline).
inline unsigned long long globaltimer_ns() { emu::fail("%globaltimer is not emulated (diagnosis builds only)"); }
inline unsigned ballot(bool p) { return __ballot_sync(0xffffffffu, p); }
inline float shfl_xor_f(float v, int mask) { return __shfl_xor_sync(0xffffffffu, v, mask); }
inline unsigned shfl_xor_u(unsigned v, int mask) { return __shfl_xor_sync(0xffffffffu, v, mask); }
inline float shfl_f(float v, int src) { return __shfl_sync(0xffffffffu, v, src); }
inline int shfl_xor_i(int v, int mask) { return __shfl_xor_sync(0xffffffffu, v, mask); }
inline int shfl_i(int v, int src) { return __shfl_sync(0xffffffffu, v, src); }
inline void syncwarp() { __syncwarp(0xffffffffu); }
inline int popc(unsigned v) { return __builtin_popcount(v); }
inline unsigned lanemask_lt(int lane) { return (1u << lane) - 1u; }
inline int lowest_set_bit(unsigned v) { return __builtin_ctz(v); }

}  // namespace sim
}  // namespace tunelab
