// Gram matrix of a set of states: K_ij = |<x_i, x_j>|^2, fp32 output, fp32 accumulation.
//
// Real inputs (fp16, bf16: mma.m16n8k16; fp32: 3xTF32, see mma_tile.cuh) square one dot product. Complex64
// states are read as interleaved (re, im) floats, a real matrix with 2 * dim columns U. Then
//   Re<x_i, x_j> = U_i . U_j           and   Im<x_i, x_j> = U_i . V_j,   V_j = U_j rotated by -i: (im, -re),
// two real 3xTF32 GEMMs sharing the A fragments; V's fragments come from U's by one lane shuffle (the two
// halves of a complex element sit in neighbouring lanes of a quad). That is 4 real products per complex
// product, like the textbook formula; the 3M trick would save a quarter of the MMAs but needs (re + im) sums
// of both operands, i.e. a third operand tile, and loses accuracy on cancellation.
//
// SYMMETRIC: only tiles on or above the diagonal run (tile row <= tile column; TILE_M == TILE_N), and only
// K_ij with j >= i is written; entries below the diagonal are not touched. MIRROR (with SYMMETRIC) also writes
// K_ji = K_ij, so the full matrix costs half the arithmetic. The grid is one block per upper-triangle tile,
// decoded from blockIdx.x in row-major order.
#pragma once

#include "similarity/mma_tile.cuh"

namespace tunelab {
namespace sim {

// Epilogues: K_ij = |<x_i, y_j>|^2 (Gram), or the raw product <x_i, y_j> (real inputs: the score matrix of the
// "GEMM, then top-k" ablation of the search benchmark).
enum : int { kEpiAbs2 = 0, kEpiDot = 1 };

template <int DTYPE_, int TILE_M_, int TILE_N_, int TILE_K_, int WARPS_M_, int WARPS_N_, int STAGES_, int VEC_,
          int SYMMETRIC_, int MIRROR_, int EPILOGUE_ = kEpiAbs2>
struct GramTraits {
  static constexpr int kDtype = DTYPE_;
  static constexpr int kTileM = TILE_M_;
  static constexpr int kTileN = TILE_N_;
  static constexpr int kTileK = TILE_K_;  // real scalars per row slice (2 per complex element)
  static constexpr int kWarpsM = WARPS_M_;
  static constexpr int kWarpsN = WARPS_N_;
  static constexpr int kStages = STAGES_;
  static constexpr int kVec = VEC_;
  static constexpr bool kSymmetric = SYMMETRIC_ != 0;
  static constexpr bool kMirror = MIRROR_ != 0;
  static constexpr bool kComplex = kDtype == kC64;
  static constexpr int kEpilogue = EPILOGUE_;
  static constexpr int kWarps = kWarpsM * kWarpsN;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kElemBytes = ElemInfo<kDtype>::kBytes;
  static constexpr int kRowBytes = kTileK * kElemBytes;
  static constexpr int kKSteps = kRowBytes / 32;
  static constexpr int kWarpM = kTileM / kWarpsM;
  static constexpr int kMT = kWarpM / 16;
  static constexpr int kWarpN = kTileN / kWarpsN;
  static constexpr int kNT = kWarpN / 8;
  using Layout = SmemRowLayout<kRowBytes, 1>;
  static constexpr int kATileBytes = kTileM * kRowBytes;
  static constexpr int kBTileBytes = kTileN * kRowBytes;
  static constexpr int kStageBytes = kATileBytes + kBTileBytes;
  static constexpr int kSmemBytes = kStages * kStageBytes;

  static_assert(kTileM % (16 * kWarpsM) == 0, "TILE_M must be a multiple of 16 * WARPS_M");
  static_assert(kTileN % (8 * kWarpsN) == 0, "TILE_N must be a multiple of 8 * WARPS_N");
  static_assert(kRowBytes == 64 || kRowBytes == 128 || kRowBytes == 256, "TILE_K * element bytes: 64, 128, 256");
  static_assert(!kSymmetric || kTileM == kTileN, "symmetric mode needs square tiles");
  static_assert(!kMirror || kSymmetric, "MIRROR applies to symmetric mode");
  static_assert(kThreads >= 32 && kThreads <= 512, "1 to 16 warps");
  static_assert(kStages >= 2 && kStages <= 6, "STAGES 2..6");
  static_assert(kVec == 4 || kVec == 8 || kVec == 16, "VEC 4, 8 or 16 bytes");
  static_assert(kEpilogue == kEpiAbs2 || (kEpilogue == kEpiDot && !kComplex && !kSymmetric),
                "the plain product is for real, non-symmetric use");
};

// Upper-triangle tile (row bi <= column bj) of a T x T tile grid from its row-major rank.
__device__ __forceinline__ void upper_tile(long long rank, long long T, int& bi, int& bj) {
  const long long pairs = T * (T + 1) / 2;
  const long long from_end = pairs - 1 - rank;  // rank counted from the last tile row (1 tile), upwards
  long long r = static_cast<long long>((sqrt(8.0 * static_cast<double>(from_end) + 1.0) - 1.0) * 0.5);
  while (r > 0 && r * (r + 1) / 2 > from_end) --r;  // rounding of the square root, either way
  while ((r + 1) * (r + 2) / 2 <= from_end) ++r;
  const long long o = from_end - r * (r + 1) / 2;  // 0..r
  bi = static_cast<int>(T - 1 - r);
  bj = static_cast<int>(T - 1 - o);
}

template <class Tr>
__global__ void __launch_bounds__(Tr::kThreads) similarity_gram(const __grid_constant__ GramParams p) {
#ifdef TUNELAB_EXPECTED_SMEM
  static_assert(Tr::kSmemBytes == TUNELAB_EXPECTED_SMEM,
                "launcher smem formula disagrees with the kernel's own layout (GramTraits::kSmemBytes)");
#endif
  using L = typename Tr::Layout;
  extern __shared__ __align__(1024) unsigned char tunelab_similarity_smem[];  // as topk.cuh declares it
  unsigned char* smem = tunelab_similarity_smem;
  const int tid = static_cast<int>(threadIdx.x), lane = tid & 31, warp = tid >> 5;
  const int warp_m = warp % Tr::kWarpsM, warp_n = warp / Tr::kWarpsM;
  int bi, bj;
  if constexpr (Tr::kSymmetric) {
    upper_tile(static_cast<long long>(blockIdx.x), p.tiles, bi, bj);
  } else {
    bi = static_cast<int>(blockIdx.y);
    bj = static_cast<int>(blockIdx.x);
  }
  const int m0 = bi * Tr::kTileM, n0 = bj * Tr::kTileN;
  const int KT = (p.d + Tr::kTileK - 1) / Tr::kTileK;
  const long long eb = Tr::kElemBytes;
  const char* xa = static_cast<const char*>(p.x) + m0 * p.x_stride * eb;
  const char* xb = static_cast<const char*>(p.y) + n0 * p.y_stride * eb;

  auto load = [&](int stage, int kc) {
    const unsigned base = smem_u32(smem) + static_cast<unsigned>(stage * Tr::kStageBytes);
    const int bytes_valid = p.d * Tr::kElemBytes - kc * Tr::kRowBytes;
    const long long koff = static_cast<long long>(kc) * Tr::kRowBytes;
    load_tile<Tr::kTileM, Tr::kRowBytes, Tr::kVec, Tr::kThreads, L>(base, xa + koff, p.x_stride * eb, p.m - m0,
                                                                    bytes_valid, tid);
    load_tile<Tr::kTileN, Tr::kRowBytes, Tr::kVec, Tr::kThreads, L>(base + Tr::kATileBytes, xb + koff,
                                                                    p.y_stride * eb, p.n - n0, bytes_valid, tid);
  };

  LdsmLaneAddr<L, 1> la, lb;
  la.init(a_lane_row(lane), a_lane_half(lane));
  lb.init(b_lane_row(lane), b_lane_half(lane));
  WarpMma<Tr::kDtype, Tr::kMT, Tr::kNT, false, Tr::kComplex, true> mma;  // RN accumulation: see mma_tile.cuh
  mma.zero();

#pragma unroll
  for (int s = 0; s < Tr::kStages - 1; ++s) {
    if (s < KT) load(s, s);
    cp_async_commit();
  }
  for (int kc = 0; kc < KT; ++kc) {
    cp_async_wait<Tr::kStages - 2>();
    __syncthreads();  // slice kc landed everywhere; every warp is done with the stage refilled next
    if (kc + Tr::kStages - 1 < KT) load((kc + Tr::kStages - 1) % Tr::kStages, kc + Tr::kStages - 1);
    cp_async_commit();
    const unsigned a_tile = smem_u32(smem) + static_cast<unsigned>((kc % Tr::kStages) * Tr::kStageBytes);
    const unsigned b_tile = a_tile + Tr::kATileBytes;
    const LdsmLaneAddr<L, 1> la_i = la.opaque(), lb_i = lb.opaque();
#pragma unroll
    for (int ks = 0; ks < Tr::kKSteps; ++ks)
      mma.kstep(a_tile, b_tile, la_i, lb_i, warp_m * Tr::kWarpM, warp_n * Tr::kWarpN, ks, lane);
  }
  cp_async_wait<0>();

  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int mt = 0; mt < Tr::kMT; ++mt) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int i = m0 + warp_m * Tr::kWarpM + mt * 16 + g + 8 * h;
      if (i >= p.m) continue;
      float* row = p.out + static_cast<long long>(i) * p.out_stride;
#pragma unroll
      for (int nt = 0; nt < Tr::kNT; ++nt) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int j = n0 + warp_n * Tr::kWarpN + nt * 8 + 2 * t + e;
          if (j >= p.n) continue;
          if (Tr::kSymmetric && j < i) continue;
          const float re = mma.acc[mt][nt][2 * h + e];
          float val = Tr::kEpilogue == kEpiDot ? re : re * re;
          if constexpr (Tr::kComplex) {
            const float im = mma.acc_im[mt][nt][2 * h + e];
            val = fmaf(im, im, val);
          }
          row[j] = val;
          if (Tr::kMirror && j > i) p.out[static_cast<long long>(j) * p.out_stride + i] = val;
        }
      }
    }
  }
}

}  // namespace sim
}  // namespace tunelab
