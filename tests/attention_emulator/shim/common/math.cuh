// Emulator stand-in for csrc/kernels/common/math.cuh (the SFU approximations become libm calls).
#pragma once
#include "emu_runtime.h"

namespace tunelab {

inline float fast_exp2(float x) { return std::exp2(x); }
inline float fast_log2(float x) { return std::log2(x); }

template <int WIDTH>
inline float group_allreduce_max(float v) {
  for (int mask = WIDTH / 2; mask > 0; mask >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, mask));
  return v;
}
template <int WIDTH>
inline float group_allreduce_sum(float v) {
  for (int mask = WIDTH / 2; mask > 0; mask >>= 1) v += __shfl_xor_sync(0xffffffffu, v, mask);
  return v;
}

template <class T>
constexpr T cmax(T a, T b) { return a > b ? a : b; }
template <class T>
constexpr T cmin(T a, T b) { return a < b ? a : b; }
template <class T>
constexpr T ceil_div(T a, T b) { return (a + b - 1) / b; }

}  // namespace tunelab
