// Fast math and warp reductions used by softmax-like epilogues.
#pragma once

namespace tunelab {

// 2^x on the SFU (MUFU.EX2). ftz: denormal results flush to zero, which softmax weights tolerate
// (anything below 2^-126 is far under fp16/bf16 resolution once normalised).
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ float fast_log2(float x) {
  float y;
  asm("lg2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// All-reduce over the WIDTH consecutive lanes of an aligned group (WIDTH a power of two <= 32).
// With WIDTH = 4 this reduces one row of an mma accumulator fragment (the 4 lanes of a quad own it).
template <int WIDTH>
__device__ __forceinline__ float group_allreduce_max(float v) {
#pragma unroll
  for (int mask = WIDTH / 2; mask > 0; mask >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, mask));
  return v;
}

template <int WIDTH>
__device__ __forceinline__ float group_allreduce_sum(float v) {
#pragma unroll
  for (int mask = WIDTH / 2; mask > 0; mask >>= 1) v += __shfl_xor_sync(0xffffffffu, v, mask);
  return v;
}

template <class T>
__host__ __device__ constexpr T cmax(T a, T b) { return a > b ? a : b; }
template <class T>
__host__ __device__ constexpr T cmin(T a, T b) { return a < b ? a : b; }
template <class T>
__host__ __device__ constexpr T ceil_div(T a, T b) { return (a + b - 1) / b; }

}  // namespace tunelab
