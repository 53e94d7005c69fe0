// Device helpers of the similarity family that csrc/kernels/common/ does not provide: tf32 tensor-core MMA
// and rounding, 16-bit -> fp32 unpacking, warp votes/shuffles and shared-memory scalar accessors.
//
// Every shared-memory scalar access of the family goes through lds()/sts() (and atomic_add_shared()): on the GPU
// they are plain loads and stores; the CPU emulator (tests/similarity_emulator) replaces this header to check them
// for races.
#pragma once

namespace tunelab {
namespace sim {

__device__ __forceinline__ float f32_inf() { return __int_as_float(0x7f800000); }
__device__ __forceinline__ float f32_nan() { return __int_as_float(0x7fffffff); }

template <class T>
__device__ __forceinline__ T lds(const T* p) {
  return *p;
}
template <class T>
__device__ __forceinline__ void sts(T* p, T v) {
  *p = v;
}
// Shared-memory atomic add; returns the old value (the candidate queues' slot counts).
__device__ __forceinline__ int atomic_add_shared(int* p, int v) { return atomicAdd(p, v); }
// 16-byte shared load of four consecutive floats (p 16-byte aligned).
__device__ __forceinline__ float4 lds4(const float* p) { return *reinterpret_cast<const float4*>(p); }

// fp32 -> tf32 (round to nearest, ties away: the rounding CUTLASS's 3xTF32 uses). The result is an fp32 bit
// pattern whose low 13 mantissa bits are zero, which is what the tf32 MMA reads.
__device__ __forceinline__ unsigned to_tf32(float x) {
  unsigned r;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
  return r;
}

// D (16x8, fp32) += A (16x8, tf32, row) * B (8x8, tf32, col). Fragments (g = lane / 4, t = lane % 4):
//   a[0]: (row g, k t)  a[1]: (row g+8, k t)  a[2]: (row g, k t+4)  a[3]: (row g+8, k t+4)
//   b0:   (k t, col g)  b1:   (k t+4, col g)
//   c[0..1]: row g, cols 2t..2t+1; c[2..3]: row g+8, cols 2t..2t+1 (as for m16n8k16)
__device__ __forceinline__ void mma_tf32_m16n8k8(float (&c)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
  asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
      "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// The two 16-bit values of a fragment register as fp32 (lo = bits 0..15). DTYPE 0 = fp16, 1 = bf16.
template <int DTYPE>
__device__ __forceinline__ void unpack2(unsigned v, float& lo, float& hi) {
  if constexpr (DTYPE == 0) {
    asm("{\n .reg .b16 l, h;\n mov.b32 {l, h}, %2;\n cvt.f32.f16 %0, l;\n cvt.f32.f16 %1, h;\n}\n"
        : "=f"(lo), "=f"(hi)
        : "r"(v));
  } else {
    lo = __uint_as_float(v << 16);
    hi = __uint_as_float(v & 0xffff0000u);
  }
}

// The dense search's key stores (MERGE=5, TopkBlock::dense_epilogue). TUNELAB_SIM_KEY_STORE picks their L2 policy
// for an experiment (benchmarks/similarity_key_stores.py compiles each): 0 plain st.global (the build), 1 an
// evict_last cache hint, 2 st.global.cs, 3 an evict_first cache hint, 4 st.global.cg. On an H100 none moved the
// 50K / 100 search by more than 1%, and 2 and 3 slowed the search + select pair by 6% (the select by 3.2-3.4 us:
// the keys left L2 first): results/similarity_key_stores_h100.json. What the stores cost beyond their policy, on the
// H200 at 50K / 100 (83d9989, whose kernel held these as variants 5-9; results/similarity_key_stores_what_h200.json):
// the search 33.9 us, 26.9 without stores; 16-bit keys 33.3 (half the bytes), packed two rows a word 33.0 (half the
// sectors), staged in shared memory and bulk-copied a column at a time 35.7, compared but never stored 28.6, one store
// a thread and tile 27.3. At f548531 (variants 8 and 10-12; results/similarity_key_stores_mio_h200.json, _same_h200
// .json): half the stores 33.2 and 33.0, every store to the thread's own one word 33.4, a shuffle per key instead of
// its store 27.5. Not the bytes, sectors, footprint or count of the stores, then, nor the memory-pipe instructions;
// ncu's warp samples spread the extra time over the same mbarrier waits as without stores. Nor a hazard on the
// accumulators the stores read: each tile's first MMAs overwriting them (scale-d 0, 6d95941's TUNELAB_SIM_SCALE_D0)
// instead of mma.zero() took 33.9 against 33.4 (results/similarity_key_stores_scale_d0_h200.json). Nor the write-back
// of the dirty lines the protocol's flush leaves: the stores cost 6.2 us after it, 5.0 after a clean flush and 4.8
// back to back (results/similarity_key_stores_l2_h200.json), and ncu counts 1.3 MB more DRAM writes with them
// (ncu_similarity_wb_*_h200.txt). Where they cost (timelines, topk.cuh TUNELAB_SIM_TRACE_KEYS): a group's epilogue of
// 104 stores a thread takes 2.6 us, the other group's main loop meanwhile 8.5-9.5 us instead of 5.9-6.7, and the
// block's last epilogue (1.8 us) is exposed. Spreading the stores over the other group's main loop (a pause after each
// n8 column block's, 64584de) leaves that main loop as slow (results/similarity_key_stores_pace_h200.json), and so do
// thread-block clusters that halve or quarter L2's query reads (_cluster_h200.json). The cost grows with the query
// columns stored: the first 1 or 4 of the 13 n8 column blocks' keys alone cost 0.5 and 2.1 us (d6f2d0f,
// _count_h200.json), while every column's with half the stores cost ~5.7 (above). Nor the lines they touch: stored
// fragment-native, a warp's 8-byte stores filling two whole lines (52 stores a thread), they cost 6.5 us as the
// default's do, and tile-major (one contiguous region a tile) 5.8 (b4c9fd4, _layout_h200.json).
// benchmarks/SIMILARITY.md has the rest.
#ifndef TUNELAB_SIM_KEY_STORE
#define TUNELAB_SIM_KEY_STORE 0
#endif
__device__ __forceinline__ unsigned long long key_store_policy() {
  unsigned long long p = 0;
#if TUNELAB_SIM_KEY_STORE == 1
  asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;\n" : "=l"(p));
#elif TUNELAB_SIM_KEY_STORE == 3
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(p));
#endif
  return p;
}
__device__ __forceinline__ void store_key(float* a, float v, unsigned long long pol) {
#if TUNELAB_SIM_KEY_STORE == 1 || TUNELAB_SIM_KEY_STORE == 3
  asm volatile("st.global.L2::cache_hint.f32 [%0], %1, %2;\n" ::"l"(a), "f"(v), "l"(pol) : "memory");
#elif TUNELAB_SIM_KEY_STORE == 2
  __stcs(a, v);
#elif TUNELAB_SIM_KEY_STORE == 4
  __stcg(a, v);
#else
  (void)pol;
  *a = v;
#endif
}

// MERGE=6's global bars (TopkBlock::filter_stage_bars): a query's bar as one 32-bit word in global memory (encoded
// by topk.cuh's ordered_bits()) that every block raises by an atomic max and reads back. The load and the reset are
// relaxed at GPU scope (no stale L1 line); the raise needs no result (red).
__device__ __forceinline__ void global_bar_raise(unsigned* a, unsigned v) {
  asm volatile("red.relaxed.gpu.global.max.u32 [%0], %1;\n" ::"l"(a), "r"(v) : "memory");
}
__device__ __forceinline__ unsigned global_bar_load(const unsigned* a) {
  unsigned v;
  asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(a) : "memory");
  return v;
}
// 4 consecutive words (16-byte aligned) of a query's MERGE=6 words (the bars above and the tile-maximum words):
// loaded like a bar, and reset at a block's start (relaxed at GPU scope).
__device__ __forceinline__ uint4 global_words_load4(const unsigned* a) {
  uint4 v;
  asm volatile("ld.relaxed.gpu.global.v4.u32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(a)
               : "memory");
  return v;
}
__device__ __forceinline__ void global_words_reset4(unsigned* a) {
  asm volatile("st.relaxed.gpu.global.v4.u32 [%0], {%1, %1, %1, %1};\n" ::"l"(a), "r"(0u) : "memory");
}
// %globaltimer: nanoseconds, comparable across SMs (the diagnosis builds' timelines: topk.cuh trace(), select.cuh).
__device__ __forceinline__ unsigned long long globaltimer_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// MERGE=6's count of the first tiles that raised a block row's tile-maximum words (TopkBlock::filter_wait_words()):
// one thread of a group adds its tile after a group barrier behind the group's raises (release), one thread of a
// waiting group reads it (acquire), then its group's barrier. A reader that sees a word before a raise only filters
// by a lower bar, so the answer never depends on this order; the wait does.
__device__ __forceinline__ void global_count_release_add(unsigned* a) {
  asm volatile("red.release.gpu.global.add.u32 [%0], %1;\n" ::"l"(a), "r"(1u) : "memory");
}
__device__ __forceinline__ unsigned global_count_acquire(const unsigned* a) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(a) : "memory");
  return v;
}
// The bounded wait's clock and back-off.
__device__ __forceinline__ unsigned long long spin_clock_ns() { return globaltimer_ns(); }
__device__ __forceinline__ void spin_pause_ns(unsigned ns) { __nanosleep(ns); }

__device__ __forceinline__ unsigned ballot(bool p) { return __ballot_sync(0xffffffffu, p); }
__device__ __forceinline__ float shfl_xor_f(float v, int mask) { return __shfl_xor_sync(0xffffffffu, v, mask); }
__device__ __forceinline__ unsigned shfl_xor_u(unsigned v, int mask) {
  return __shfl_xor_sync(0xffffffffu, v, mask);
}
__device__ __forceinline__ float shfl_f(float v, int src) { return __shfl_sync(0xffffffffu, v, src); }
__device__ __forceinline__ int shfl_xor_i(int v, int mask) { return __shfl_xor_sync(0xffffffffu, v, mask); }
__device__ __forceinline__ int shfl_i(int v, int src) { return __shfl_sync(0xffffffffu, v, src); }
__device__ __forceinline__ void syncwarp() { __syncwarp(0xffffffffu); }
__device__ __forceinline__ int popc(unsigned v) { return __popc(v); }
__device__ __forceinline__ unsigned lanemask_lt(int lane) { return (1u << lane) - 1u; }
// The lowest set bit's place (v != 0).
__device__ __forceinline__ int lowest_set_bit(unsigned v) { return __ffs(v) - 1; }

}  // namespace sim
}  // namespace tunelab
