// Emulator stand-in for csrc/kernels/common/mma.cuh (same API, PTX ISA fragment semantics), shared by the attention
// and similarity emulators.
#pragma once
#include "emu_runtime.h"

namespace tunelab {

enum : int { kFp16 = 0, kBf16 = 1 };

namespace emu_detail {
inline float half_to_float(uint16_t h) {
  const uint32_t sign = (h >> 15) & 1, exp = (h >> 10) & 31, man = h & 1023;
  float v;
  if (exp == 0) v = std::ldexp(static_cast<float>(man), -24);
  else if (exp == 31) v = man ? NAN : INFINITY;
  else v = std::ldexp(static_cast<float>(man | 1024), static_cast<int>(exp) - 25);
  return sign ? -v : v;
}
inline float bf16_to_float(uint16_t h) { return __uint_as_float(static_cast<uint32_t>(h) << 16); }
inline uint16_t float_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if (std::isnan(f)) return 0x7fc0;
  u += 0x7fff + ((u >> 16) & 1);
  return static_cast<uint16_t>(u >> 16);
}
inline uint16_t float_to_half(float f) {
  // round to nearest even through double arithmetic on the exact grid
  if (std::isnan(f)) return 0x7e00;
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  double a = std::fabs(static_cast<double>(f));
  if (a >= 65520.0) return sign | 0x7c00;
  int e;
  std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
  int exp_unb = e - 1;
  if (exp_unb < -14) exp_unb = -14;  // subnormals share the 2^-24 grid
  const double quantum = std::ldexp(1.0, exp_unb - 10);
  double q = std::nearbyint(a / quantum) * quantum;  // default rounding mode: nearest even
  // re-encode
  if (q == 0) return sign;
  int e2;
  std::frexp(q, &e2);
  int ue = e2 - 1;
  if (ue < -14) return sign | static_cast<uint16_t>(std::lround(q / std::ldexp(1.0, -24)));
  if (ue > 15) return sign | 0x7c00;
  const uint16_t man = static_cast<uint16_t>(std::lround((q / std::ldexp(1.0, ue) - 1.0) * 1024.0));
  return sign | static_cast<uint16_t>((ue + 15) << 10) | man;
}
template <int DTYPE>
inline float to_float(uint16_t h) { return DTYPE == kFp16 ? half_to_float(h) : bf16_to_float(h); }
template <int DTYPE>
inline uint16_t from_float(float f) { return DTYPE == kFp16 ? float_to_half(f) : float_to_bf16(f); }

inline uint16_t smem_u16(unsigned addr) {
  uint16_t v;
  std::memcpy(&v, emu::smem_buffer + addr, 2);
  return v;
}
template <int N>
inline void ldmatrix_impl(unsigned (&r)[N], unsigned addr, bool trans) {
  const int lane = emu::lane();
  if (lane < 8 * N) {  // only these lanes' row addresses are used
    if (addr % 16 != 0) emu::fail("ldmatrix row address %u not 16-byte aligned", addr);
    emu::note_smem_read(addr, 16);
  }
  emu::warp_collective(trans ? "ldmatrix.trans" : "ldmatrix", &addr, 4, [&](const unsigned char* const* all) {
    for (int i = 0; i < N; ++i) {
      auto row_addr = [&](int row) { return *reinterpret_cast<const unsigned*>(all[8 * i + row]); };
      uint16_t lo, hi;
      if (!trans) {
        lo = smem_u16(row_addr(lane >> 2) + 4 * (lane & 3));
        hi = smem_u16(row_addr(lane >> 2) + 4 * (lane & 3) + 2);
      } else {
        lo = smem_u16(row_addr(2 * (lane & 3)) + 2 * (lane >> 2));
        hi = smem_u16(row_addr(2 * (lane & 3) + 1) + 2 * (lane >> 2));
      }
      r[i] = static_cast<unsigned>(lo) | (static_cast<unsigned>(hi) << 16);
    }
  });
}
}  // namespace emu_detail

// D = A*B + C for m16n8k16 fp16/bf16 per the PTX fragment maps; products and sums in double.
template <int DTYPE>
inline void mma_m16n8k16(float (&c)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
  struct In {
    unsigned a[4], b[2];
  } in{{a[0], a[1], a[2], a[3]}, {b0, b1}};
  const int lane = emu::lane();
  emu::warp_collective(DTYPE == kFp16 ? "mma.f16" : "mma.bf16", &in, sizeof(In), [&](const unsigned char* const* all) {
    float A[16][16], B[16][8];
    for (int l = 0; l < 32; ++l) {
      const In& x = *reinterpret_cast<const In*>(all[l]);
      const int g = l >> 2, t = l & 3;
      auto lo = [](unsigned r) { return emu_detail::to_float<DTYPE>(static_cast<uint16_t>(r & 0xffff)); };
      auto hi = [](unsigned r) { return emu_detail::to_float<DTYPE>(static_cast<uint16_t>(r >> 16)); };
      A[g][2 * t] = lo(x.a[0]);          A[g][2 * t + 1] = hi(x.a[0]);
      A[g + 8][2 * t] = lo(x.a[1]);      A[g + 8][2 * t + 1] = hi(x.a[1]);
      A[g][2 * t + 8] = lo(x.a[2]);      A[g][2 * t + 9] = hi(x.a[2]);
      A[g + 8][2 * t + 8] = lo(x.a[3]);  A[g + 8][2 * t + 9] = hi(x.a[3]);
      B[2 * t][g] = lo(x.b[0]);          B[2 * t + 1][g] = hi(x.b[0]);
      B[2 * t + 8][g] = lo(x.b[1]);      B[2 * t + 9][g] = hi(x.b[1]);
    }
    const int g = lane >> 2, t = lane & 3;
    const int rows[4] = {g, g, g + 8, g + 8}, cols[4] = {2 * t, 2 * t + 1, 2 * t, 2 * t + 1};
    for (int e = 0; e < 4; ++e) {
      double acc = c[e];
      for (int k = 0; k < 16; ++k) acc += static_cast<double>(A[rows[e]][k]) * B[k][cols[e]];
      c[e] = static_cast<float>(acc);
    }
  });
}

inline void ldmatrix_x4(unsigned (&r)[4], unsigned a) { emu_detail::ldmatrix_impl<4>(r, a, false); }
inline void ldmatrix_x4_trans(unsigned (&r)[4], unsigned a) { emu_detail::ldmatrix_impl<4>(r, a, true); }
inline void ldmatrix_x2(unsigned (&r)[2], unsigned a) { emu_detail::ldmatrix_impl<2>(r, a, false); }

template <int DTYPE>
inline unsigned pack_float2(float lo, float hi) {
  return static_cast<unsigned>(emu_detail::from_float<DTYPE>(lo)) |
         (static_cast<unsigned>(emu_detail::from_float<DTYPE>(hi)) << 16);
}

inline unsigned smem_u32(const void* p) { return static_cast<unsigned>(__cvta_generic_to_shared(p)); }

}  // namespace tunelab
