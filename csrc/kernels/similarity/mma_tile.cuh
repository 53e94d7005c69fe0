// The tensor-core main loop pieces shared by the top-k search and the Gram kernels: a cp.async tile loader
// and one warp's MMA over one 32-byte k-step of two row-major shared-memory tiles (C = A * B^T, both
// operands with the reduction dimension contiguous: corpus/queries for search, states for Gram).
//
// Element types: fp16 and bf16 use mma.m16n8k16 (exact products, fp32 accumulation). fp32 uses 3xTF32:
// x = hi + lo (split_tf32: hi is x rounded to tf32's 11 significant bits, lo = x - hi exactly), and
// a*b ~= a_hi*b_hi + a_hi*b_lo + a_lo*b_hi, three m16n8k8 tf32 MMAs. The dropped a_lo*b_lo term and the MMA's
// truncation of lo are ~2^-22 relative per product; plain 1xTF32 (2^-11 per product) would reorder near
// neighbours and is deliberately not offered.
// Accumulation: the tensor core adds into its C operand with truncation (round toward zero), so a running sum
// kept inside the MMAs drifts by ~2^-23 of the *running* total at every one of the 3 * d / 8 MMAs - a bias that
// grows linearly with d (measured on the H200: Gram error 3.5x cuBLAS's FP32-FMA error at 2 * 96 real columns,
// 8-9x at 2 * 256). tf32x3_step therefore runs the three MMAs of one k-step on a zeroed 4-register partial and
// adds that partial to the fp32 accumulator with ordinary round-to-nearest FADDs (the fix of Ootomo & Yokota,
// "Recovering single precision accuracy from Tensor Cores while surpassing the FP32 theoretical peak
// performance", 2022): truncation then applies only to one k-step's partial, and the summation over k-steps
// is an fp32 FFMA loop's. WarpMma applies it where RN_ACC says so (the Gram kernel).
#pragma once

#include "common/cp_async.cuh"
#include "common/mma.cuh"
#include "common/smem_layout.cuh"
#include "similarity/params.cuh"
#include "similarity/ptx.cuh"

namespace tunelab {
namespace sim {

// One k-step (k = 8) of 3xTF32 into the fp32 accumulator c: a*b ~= a_lo*b_hi + a_hi*b_lo + a_hi*b_hi (small terms
// first, so they meet a partial sum of their own size) on a zeroed partial, then c += partial in round-to-nearest.
__device__ __forceinline__ void tf32x3_step(float (&c)[4], const unsigned (&ah)[4], const unsigned (&al)[4],
                                            const unsigned (&bh)[2], const unsigned (&bl)[2]) {
  float part[4] = {0.f, 0.f, 0.f, 0.f};
  mma_tf32_m16n8k8(part, al, bh[0], bh[1]);
  mma_tf32_m16n8k8(part, ah, bl[0], bl[1]);
  mma_tf32_m16n8k8(part, ah, bh[0], bh[1]);
#pragma unroll
  for (int i = 0; i < 4; ++i) c[i] += part[i];
}

// fp32 -> (hi, lo) for 3xTF32 by Veltkamp's split: c = 8193 x, hi = c - (c - x) is x rounded to 11 significant
// bits (nearest, ties to even), which the tf32 MMA reads exactly; lo = x - hi is exact and has at most 12
// significant bits, of which the MMA reads 11 (truncation: at most 2^-22 of x). (For |x| below ~2^-104 hi
// keeps bits under tf32's subnormal grid, which the MMA drops: an absolute error below 2^-136 |b|.) Four FP32
// instructions, where two cvt.rna.tf32 (ptxas emulates each with an add, an |x| >= inf test, a select and a mask)
// and the subtraction took seven: at nq <= 8 the fp32 main loop is bound by its instruction issue, not by memory
// (ncu on an H100: results/ncu_similarity_fp32_nq1_h100.txt; with this split 21% fewer instructions, 13% faster
// over an L2-resident corpus and 12% on the complex64 Gram kernel, benchmarks/SIMILARITY.md). The _rn intrinsics
// keep the compiler from contracting the product into an FMA, which would break the split. NaN stays NaN, inf gives
// NaN (as the cvt split did, through lo), and so does any |x| above FLT_MAX / 8193 (~4.15e34), where c overflows:
// such an element never yields a finite key or Gram entry.
//
// CVT = true: the split by two cvt.rna.tf32 instead (ties away, lo rounded too: the same 2^-22 order). Veltkamp's
// keeps more values live while it runs, and next to 112 accumulators plus row norms (fp32 cosine and l2 at
// nq = 100: 255 registers) it spilled, so WarpMma keeps the cvt split for tiles that large (kCvtSplit).
template <bool CVT = false>
__device__ __forceinline__ void split_tf32(float x, unsigned& hi, unsigned& lo) {
  if constexpr (CVT) {
    hi = to_tf32(x);
    lo = to_tf32(x - __uint_as_float(hi));
  } else {
    const float c = __fmul_rn(x, 8193.0f);
    const float h = __fadd_rn(c, -__fadd_rn(c, -x));
    hi = __float_as_uint(h);
    lo = __float_as_uint(__fadd_rn(x, -h));
  }
}

template <int DTYPE>
struct ElemInfo {
  static_assert(DTYPE >= kF16 && DTYPE <= kC64, "element type code 0..3");
  static constexpr int kBytes = (DTYPE == kF16 || DTYPE == kBF16) ? 2 : 4;
  static constexpr bool kTf32 = DTYPE == kF32 || DTYPE == kC64;
};

// Copies a ROWS x ROW_BYTES tile of a row-major matrix (rows stride_bytes apart, starting at gmem) into a
// swizzled shared-memory tile with VEC-byte cp.async. Rows >= rows_valid and bytes >= bytes_valid are
// zero-filled (src-size 0), so corpus, query and feature-dimension tails contribute exactly 0 to products.
// bytes_valid must be a multiple of VEC (the launcher checks d * element bytes % VEC == 0).
template <int ROWS, int ROW_BYTES, int VEC, int THREADS, class Layout>
__device__ __forceinline__ void load_tile(unsigned smem_tile, const char* gmem, long long stride_bytes, int rows_valid,
                                          int bytes_valid, int tid) {
  constexpr int kPerRow = ROW_BYTES / VEC;
  constexpr int kTotal = ROWS * kPerRow;
#pragma unroll
  for (int i0 = 0; i0 < kTotal; i0 += THREADS) {
    const int i = i0 + tid;
    if (kTotal % THREADS == 0 || i < kTotal) {
      const int row = i / kPerRow;
      const int col = (i % kPerRow) * VEC;
      const bool pred = row < rows_valid && col < bytes_valid;
      // A predicated-off copy reads nothing, but its address must still be valid: use the tile start.
      const char* src = pred ? gmem + row * stride_bytes + col : gmem;
      cp_async<VEC>(smem_tile + static_cast<unsigned>(Layout::offset(row, col)), src, pred);
    }
  }
}

// ldmatrix lane roles. A (16 rows x one 32-byte k-step) is four 8x8 matrices: rows 0-7 / 8-15 x chunks
// 2ks / 2ks+1, so lane l addresses row l % 16, chunk 2ks + l / 16, and the registers come out as the m16n8k16
// A fragment (and, for 32-bit elements, exactly the m16n8k8 tf32 A fragment: a0 (g, t), a1 (g+8, t),
// a2 (g, t+4), a3 (g+8, t+4)). B (two n8 tiles x one k-step) is rows 0-7 chunk 2ks, rows 0-7 chunk 2ks+1,
// rows 8-15 chunk 2ks, rows 8-15 chunk 2ks+1: lane l addresses row l % 8 + 8 * (l / 16), chunk
// 2ks + (l / 8) % 2, giving (b0, b1) of n-tile 0 then of n-tile 1; with .x2 lanes 0-15 give n-tile 0 alone.
__device__ __forceinline__ int a_lane_row(int lane) { return lane & 15; }
__device__ __forceinline__ int a_lane_half(int lane) { return lane >> 4; }
__device__ __forceinline__ int b_lane_row(int lane) { return (lane & 7) + ((lane >> 4) << 3); }
__device__ __forceinline__ int b_lane_half(int lane) { return (lane >> 3) & 1; }

// One warp's MT x NT grid of m16 x n8 accumulators (rows from the A tile, columns from the B tile).
//   NORMS:   keep squared norms of each A row the lane owns (rows g and g+8 of every m16 tile), accumulated by
//            norms_kstep(); quad_reduce_norms() completes them.
//   COMPLEX: inputs are interleaved complex64 (re, im) pairs; acc gets Re<a_i, b_j> = sum(re re + im im) and
//            acc_im gets Im<a_i, b_j> = sum(re_a im_b - im_a re_b), i.e. <a_i, b_j> = sum conj(a_i) b_j.
// RN_ACC (3xTF32 only): accumulate each k-step's partial with round-to-nearest FADDs (tf32x3_step) instead of
// inside the MMAs. The Gram kernel uses it (its output is the product itself); the top-k search does not: its
// scores only rank candidates (the numerics gate checks them against float64 with a tie tolerance), and the 4
// partial registers would make its 112-accumulator default spill.
//
// FMA (the search's MMA=4; fp32, NT = 1): no tensor cores. Each lane keeps fp32 partial dot products of its rows g and
// g+8 of every m16 block with each of the n8 tile's first FQ query columns over the k it holds in the A fragment
// (k = t and t + 4 of every k-step), accumulated with FFMA (fma_kstep); fma_finish() sums a quad's four partials
// and lays the sums out as the m16n8 C fragment in acc, which is all the epilogues read. Per k-step a warp issues
// its A and B ldmatrix, 2 FQ shuffles (a query's two values to the lanes that need them) and 4 MT FQ FFMAs,
// against 3xTF32's 16 MT + 8 splitting instructions and 3 MT MMAs: at nq = 1 about a quarter of the k-steps'
// instructions (the whole search's: 2.71M against 4.04M on an H100, benchmarks/SIMILARITY.md), and plain fp32
// products and sums, no tf32 truncation. It pays for few queries only (at FQ = 8 its FFMAs outnumber 3xTF32's
// instructions), so the tuner and the defaults decide (ops/similarity.py default_config).
template <int DTYPE, int MT, int NT, bool NORMS, bool COMPLEX, bool RN_ACC = false, bool FMA = false>
struct WarpMma {
  static_assert(!COMPLEX || DTYPE == kC64, "complex accumulation needs complex64 inputs");
  static_assert(!FMA || (DTYPE == kF32 && NT == 1 && !COMPLEX), "FMA main loop: fp32, one n8 query tile per warp");
  static constexpr int kMTi = COMPLEX ? MT : 1;
  static constexpr int kNTi = COMPLEX ? NT : 1;
  // the cvt split where Veltkamp's would spill (split_tf32): more than 112 accumulator and norm registers
  static constexpr bool kCvtSplit = MT * NT * 4 * (COMPLEX ? 2 : 1) + (NORMS ? 2 * MT : 0) > 112;
  float acc[MT][NT][4];
  float acc_im[kMTi][kNTi][4];
  float nrm[MT][2];
  // FMA: partial dot products [m16 block][row g, g + 8][query column of the n8 tile]
  static constexpr int kFmaQ = FMA ? 8 : 1;
  float part[FMA ? MT : 1][2][kFmaQ];

  __device__ __forceinline__ static void tf32x3(float (&c)[4], const unsigned (&ah)[4], const unsigned (&al)[4],
                                                const unsigned (&bh)[2], const unsigned (&bl)[2]) {
    if constexpr (RN_ACC) {
      tf32x3_step(c, ah, al, bh, bl);
    } else {  // small terms first: they are then added to a partial sum of their own size
      mma_tf32_m16n8k8(c, al, bh[0], bh[1]);
      mma_tf32_m16n8k8(c, ah, bl[0], bl[1]);
      mma_tf32_m16n8k8(c, ah, bh[0], bh[1]);
    }
  }

  __device__ __forceinline__ void zero() {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      nrm[mt][0] = 0.f;
      nrm[mt][1] = 0.f;
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[mt][nt][e] = 0.f;
    }
#pragma unroll
    for (int mt = 0; mt < kMTi; ++mt)
#pragma unroll
      for (int nt = 0; nt < kNTi; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc_im[mt][nt][e] = 0.f;
    if constexpr (FMA) {
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
          for (int n = 0; n < kFmaQ; ++n) part[mt][h][n] = 0.f;
    }
  }

  // FMA: one 32-byte k-step (8 fp32 elements) for the first FQ query columns of the warp's n8 tile (the others keep
  // their zero partials: pass FQ >= the tile's real queries). The A fragment holds (g, t), (g+8, t), (g, t+4),
  // (g+8, t+4); the B fragment (b0, b1) = query g's k = t and t + 4, which column n's FFMAs take from lane 4 n + t.
  template <int FQ, class LA, class LB>
  __device__ __forceinline__ void fma_kstep(unsigned a_tile, unsigned b_tile, const LA& la, const LB& lb, int a_row0,
                                            int b_row0, int ks, int lane) {
    static_assert(FMA && FQ >= 1 && FQ <= 8, "fma_kstep: the FMA main loop, 1..8 query columns");
    unsigned a[MT][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) ldmatrix_x4(a[mt], a_tile + la.at(a_row0 + mt * 16, ks));
    unsigned b[2];
    ldmatrix_x2(b, b_tile + lb.at(b_row0, ks));
#pragma unroll
    for (int n = 0; n < FQ; ++n) {
      const int src = (n << 2) | (lane & 3);
      const float q_t = shfl_f(__uint_as_float(b[0]), src), q_t4 = shfl_f(__uint_as_float(b[1]), src);
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        part[mt][0][n] = fmaf(__uint_as_float(a[mt][2]), q_t4, fmaf(__uint_as_float(a[mt][0]), q_t, part[mt][0][n]));
        part[mt][1][n] = fmaf(__uint_as_float(a[mt][3]), q_t4, fmaf(__uint_as_float(a[mt][1]), q_t, part[mt][1][n]));
      }
    }
  }

  // FMA: a tile's partials of the first FQ columns (the fma_kstep<FQ> ones; the others are 0) -> acc in the m16n8 C
  // layout (c0, c1: row g, columns 2t, 2t + 1; c2, c3: row g + 8). The quad's butterfly leaves every lane each full
  // sum, the same in all four; the lane keeps its own columns by unrolled selects (a runtime register index would go
  // to local memory). A sum of +-inf (an inf element, or products that overflow) becomes NaN, so that such a row
  // never enters the results, as with 3xTF32, whose split turns an inf (and any element above ~4.15e34) into NaN;
  // finite elements of any size score as fp32 arithmetic gives them.
  template <int FQ>
  __device__ __forceinline__ void fma_finish(int lane) {
    static_assert(FMA && FQ >= 1 && FQ <= 8, "fma_finish: the FMA main loop, 1..8 query columns");
    const int c0 = 2 * (lane & 3);
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float lo = 0.f, hi = 0.f;
#pragma unroll
        for (int n = 0; n < FQ; ++n) {
          float v = part[mt][h][n];
          v += shfl_xor_f(v, 1);
          v += shfl_xor_f(v, 2);
          v = fabsf(v) == f32_inf() ? f32_nan() : v;  // +-inf: NaN (above)
          lo = n == c0 ? v : lo;
          hi = n == c0 + 1 ? v : hi;
        }
        acc[mt][0][2 * h] = lo;
        acc[mt][0][2 * h + 1] = hi;
      }
  }

  // The 4 lanes of a quad hold disjoint columns of the same rows: sum their partial norms.
  __device__ __forceinline__ void quad_reduce_norms() {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float v = nrm[mt][h];
        v += shfl_xor_f(v, 1);
        v += shfl_xor_f(v, 2);
        nrm[mt][h] = v;
      }
  }

  // Squared norms of the lane's A rows over one 32-byte k-step, from A fragments re-read with ldmatrix. Row block
  // mt starts at tile row a_row0 + mt * ROW_STRIDE (16: a warp's m16 tiles; 64: a warpgroup's m64 blocks).
  // A pass of its own (not fused into kstep()): fused, the unpacked values compete with the accumulators and
  // B fragments for registers (+34 per thread at 64 x 56 warp tiles, which then spilled); separately it runs
  // when the B fragments are dead, and only in the warps that need it.
  template <class LA, int ROW_STRIDE = 16>
  __device__ __forceinline__ void norms_kstep(unsigned a_tile, const LA& la, int a_row0, int ks) {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      unsigned a[4];
      ldmatrix_x4(a, a_tile + la.at(a_row0 + mt * ROW_STRIDE, ks));
      if constexpr (ElemInfo<DTYPE>::kTf32) {
        const float x0 = __uint_as_float(a[0]), x1 = __uint_as_float(a[1]);
        const float x2 = __uint_as_float(a[2]), x3 = __uint_as_float(a[3]);
        nrm[mt][0] = fmaf(x2, x2, fmaf(x0, x0, nrm[mt][0]));
        nrm[mt][1] = fmaf(x3, x3, fmaf(x1, x1, nrm[mt][1]));
      } else {
        float l0, h0, l1, h1, l2, h2, l3, h3;
        unpack2<DTYPE>(a[0], l0, h0);
        unpack2<DTYPE>(a[1], l1, h1);
        unpack2<DTYPE>(a[2], l2, h2);
        unpack2<DTYPE>(a[3], l3, h3);
        nrm[mt][0] = fmaf(h2, h2, fmaf(l2, l2, fmaf(h0, h0, fmaf(l0, l0, nrm[mt][0]))));
        nrm[mt][1] = fmaf(h3, h3, fmaf(l3, l3, fmaf(h1, h1, fmaf(l1, l1, nrm[mt][1]))));
      }
    }
  }

  // One 32-byte k-step (16 fp16/bf16 or 8 fp32 elements) of the tiles at a_tile / b_tile (shared-window
  // addresses). a_row0 / b_row0: first tile row of this warp (multiples of 8, so the swizzle key of the
  // lane's row is unchanged); ks: k-step index within the tile rows.
  template <class LA, class LB>
  __device__ __forceinline__ void kstep(unsigned a_tile, unsigned b_tile, const LA& la, const LB& lb, int a_row0,
                                        int b_row0, int ks, int lane) {
    unsigned a[MT][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) ldmatrix_x4(a[mt], a_tile + la.at(a_row0 + mt * 16, ks));
    unsigned b[NT][2];
#pragma unroll
    for (int p = 0; p < NT / 2; ++p) {
      unsigned t4[4];
      ldmatrix_x4(t4, b_tile + lb.at(b_row0 + p * 16, ks));
      b[2 * p][0] = t4[0];
      b[2 * p][1] = t4[1];
      b[2 * p + 1][0] = t4[2];
      b[2 * p + 1][1] = t4[3];
    }
    if constexpr (NT % 2 == 1) {
      unsigned t2[2];
      ldmatrix_x2(t2, b_tile + lb.at(b_row0 + (NT - 1) * 8, ks));
      b[NT - 1][0] = t2[0];
      b[NT - 1][1] = t2[1];
    }
    if constexpr (!ElemInfo<DTYPE>::kTf32) {
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) mma_m16n8k16<DTYPE>(acc[mt][nt], a[mt], b[nt][0], b[nt][1]);
    } else {
      unsigned ah[MT][4], al[MT][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          split_tf32<kCvtSplit>(__uint_as_float(a[mt][e]), ah[mt][e], al[mt][e]);
        }
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        unsigned bh[2], bl[2];
#pragma unroll
        for (int e = 0; e < 2; ++e) split_tf32<kCvtSplit>(__uint_as_float(b[nt][e]), bh[e], bl[e]);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) tf32x3(acc[mt][nt], ah[mt], al[mt], bh, bl);
        if constexpr (COMPLEX) {
          // B' = B rotated by -i: (re, im) -> (im, -re). The lane holding k = t holds the other half of its
          // complex element at k = t ^ 1, i.e. in lane ^ 1 (same row g); k = t + 4 has the same parity.
          const bool odd = (lane & 1) != 0;
          unsigned rh[2], rl[2];
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const unsigned partner = shfl_xor_u(b[nt][e], 1);
            split_tf32<kCvtSplit>(__uint_as_float(odd ? (partner ^ 0x80000000u) : partner), rh[e], rl[e]);
          }
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) tf32x3(acc_im[mt][nt], ah[mt], al[mt], rh, rl);
        }
      }
    }
  }
};

}  // namespace sim
}  // namespace tunelab
