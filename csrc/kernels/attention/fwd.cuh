// Attention forward, portable tensor-core path (mma.sync + ldmatrix + cp.async; sm_80 and newer).
//
//   O = softmax(scale * Q K^T + mask) V   per (batch, head), fp32 accumulation, optional LSE.
//
// FlashAttention-2 structure: a CTA owns BLOCK_M query rows and streams the K/V rows of its (batch, head)
// in BLOCK_N tiles through a STAGES-deep cp.async ring; scores and the output accumulator never leave
// registers; softmax is computed online (running max m, running sum l, one rescale of O per tile).
//
// Warp layout: NUM_WARPS = WARPS_M x KV_SPLIT_WARPS. Warp (wm, wn) owns query rows
// [wm*WARP_ROWS, +WARP_ROWS) and key columns [wn*WARP_COLS, +WARP_COLS) of every KV tile. With
// KV_SPLIT_WARPS = 1 this is FA2's split along M (no cross-warp traffic); with 2 or 4 the warps that
// share query rows see disjoint key columns, keep private (m, l, O), and merge them through shared
// memory at the end (useful when BLOCK_M is small: short queries, causal diagonal blocks).
//
// Iteration order: KV tiles are visited last to first, so the tiles that need masking (the partial tile
// at the end of the sequence and the causal diagonal) come first and the rest skip the mask.
//
// Masking and edge semantics:
//   * keys j >= Sk are masked; query rows >= Sq are computed on zero-filled Q and never stored;
//   * causal: query i sees key j iff j <= i + causal_offset (see params.cuh); whole KV tiles beyond
//     the last visible key of the block are never loaded;
//   * a query row that sees no key at all (causal with Sq > Sk, bottom-right) gets O = 0 and
//     LSE = -inf (torch 2.11's SDPA math backend with an explicit causal_lower_right mask also returns 0;
//     FlashAttention-2 returns 0 too);
//   * the softmax scale must be > 0 (the launcher checks): max(scale * s) is taken as scale * max(s).
//
// Shared memory: one dynamic buffer of exactly Traits::kSmemBytes bytes, no static shared memory.
//   [stage 0: K tile | V tile] ... [stage STAGES-1: K | V] then the Q tile. With Q_IN_REGS the Q tile
//   overlaps the last stage (which the prologue leaves empty) because Q is moved to registers before
//   that stage is first filled. The epilogue reuses the buffer for the O tile (and, with
//   KV_SPLIT_WARPS > 1, for the fp32 partial results).
#pragma once

#include "attention/params.cuh"
#include "common/cp_async.cuh"
#include "common/math.cuh"
#include "common/mma.cuh"
#include "common/smem_layout.cuh"

namespace tunelab {

template <int DTYPE_, int HEAD_DIM_, int BLOCK_M_, int BLOCK_N_, int NUM_WARPS_, int STAGES_, int SWIZZLE_,
          int VEC_LOAD_, int Q_IN_REGS_, int UNROLL_, int KV_SPLIT_WARPS_, int IS_CAUSAL_>
struct AttentionTraits {
  static constexpr int kDtype = DTYPE_;
  static constexpr int kHeadDim = HEAD_DIM_;
  static constexpr int kBlockM = BLOCK_M_;
  static constexpr int kBlockN = BLOCK_N_;
  static constexpr int kNumWarps = NUM_WARPS_;
  static constexpr int kStages = STAGES_;
  static constexpr int kSwizzle = SWIZZLE_;
  static constexpr int kVecLoad = VEC_LOAD_;
  static constexpr bool kQInRegs = Q_IN_REGS_ != 0;
  static constexpr int kUnroll = UNROLL_;
  static constexpr int kKvSplitWarps = KV_SPLIT_WARPS_;
  static constexpr bool kIsCausal = IS_CAUSAL_ != 0;

  static constexpr int kThreads = kNumWarps * 32;
  static constexpr int kWarpsN = kKvSplitWarps;
  static constexpr int kWarpsM = kNumWarps / kWarpsN;
  static constexpr int kWarpRows = kBlockM / kWarpsM;  // query rows per warp
  static constexpr int kWarpCols = kBlockN / kWarpsN;  // key columns per warp per tile
  static constexpr int kMT = kWarpRows / 16;           // 16-row m fragments per warp
  static constexpr int kNF = kWarpCols / 8;            // 8-column score fragments per warp
  static constexpr int kPK = kWarpCols / 16;           // k-steps of P.V per warp
  static constexpr int kKSteps = kHeadDim / 16;        // k-steps of Q.K^T
  static constexpr int kDF = kHeadDim / 8;             // 8-column output fragments

  // Unroll factors ("full" = larger than any trip count). P.V is always fully unrolled because the
  // P fragments it consumes are registers indexed by its k-step; so is Q.K^T when Q lives in registers.
  static constexpr int kUnrollCopy = kUnroll == 0 ? 64 : kUnroll;
  static constexpr int kUnrollQK = (kQInRegs || kUnroll == 0) ? 64 : kUnroll;

  using Layout = SmemRowLayout<kHeadDim * 2, kSwizzle>;
  static constexpr int kRowBytes = kHeadDim * 2;
  static constexpr int kPitch = Layout::kPitch;
  static constexpr int kTileBytes = kBlockN * kPitch;  // one K or one V tile
  static constexpr int kStageBytes = 2 * kTileBytes;
  static constexpr int kQBytes = kBlockM * kPitch;
  static constexpr int kQOffset = kQInRegs ? (kStages - 1) * kStageBytes : kStages * kStageBytes;
  static constexpr int kPipeBytes = cmax(kStages * kStageBytes, kQOffset + kQBytes);
  static constexpr int kAccPitch = (kHeadDim + 8) * 4;  // fp32 partial-O rows, +32 B: conflict-free float2 writes
  static constexpr int kReduceBytes = kWarpsN > 1 ? kWarpsN * kBlockM * (kAccPitch + 8) : 0;
  static constexpr int kSmemBytes = cmax(kPipeBytes, kReduceBytes);

  static_assert(kDtype == 0 || kDtype == 1, "DTYPE: 0 = fp16, 1 = bf16");
  static_assert(kHeadDim % 32 == 0 && kHeadDim >= 32 && kHeadDim <= 256, "HEAD_DIM: a multiple of 32 in 32..256");
  static_assert(kNumWarps >= 1 && kNumWarps <= 16, "NUM_WARPS in 1..16");
  static_assert(kWarpsN >= 1 && kNumWarps % kWarpsN == 0, "KV_SPLIT_WARPS must divide NUM_WARPS");
  static_assert(kBlockM % (16 * kWarpsM) == 0, "BLOCK_M must be a multiple of 16 * NUM_WARPS / KV_SPLIT_WARPS");
  static_assert(kBlockN % (16 * kWarpsN) == 0, "BLOCK_N must be a multiple of 16 * KV_SPLIT_WARPS");
  static_assert(kStages >= 2 && kStages <= 4, "STAGES in 2..4");
  static_assert(kVecLoad == 4 || kVecLoad == 8 || kVecLoad == 16, "VEC_LOAD: 4, 8 or 16 bytes");
  static_assert(kUnroll == 0 || kUnroll == 1 || kUnroll == 2, "UNROLL: 0 (full), 1 or 2");
  static_assert(kSmemBytes % 128 == 0, "every buffer is a multiple of 128 bytes");
};

namespace attention_detail {

__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000); }

// Cooperative copy of a [ROWS x HEAD_DIM] tile, VEC_LOAD bytes per cp.async. Consecutive threads take
// consecutive chunks of a row, so each warp reads whole 128-byte lines of global memory.
// kCheckRows: rows >= rows_valid are zero-filled. Only the first KV tile a CTA loads (the partial one at
// the end of the sequence) and the Q tile can be partial: KV tiles are visited last to first.
// Per thread the chunks of one tile are a fixed column at rows row0 + i * kRowStep, so the per-tile cost
// is one 64-bit multiply-add plus one add per chunk, and nothing needs to stay live across iterations
// beyond two stride registers (hoisted per-chunk addresses used to cost ~50 registers).
template <class Tr, int ROWS, bool kCheckRows>
__device__ __forceinline__ void load_tile(unsigned smem_tile, const char* gmem, long long row_stride_bytes,
                                          int rows_valid, int tid) {
  using L = typename Tr::Layout;
  constexpr int kVec = Tr::kVecLoad;
  constexpr int kPerRow = Tr::kRowBytes / kVec;
  constexpr int kTotal = ROWS * kPerRow;
  constexpr int kT = Tr::kThreads;
  constexpr int kIters = ceil_div(kTotal, kT);
  if constexpr (kT % kPerRow == 0) {
    // every thread keeps one column; rows advance by kRowStep
    constexpr int kRowStep = kT / kPerRow;
    const int row0 = tid / kPerRow;
    const int col = (tid % kPerRow) * kVec;
    const char* src0 = gmem + row0 * row_stride_bytes + col;
    const long long step = kRowStep * row_stride_bytes;
#pragma unroll(Tr::kUnrollCopy)
    for (int i = 0; i < kIters; ++i) {
      const int row = row0 + i * kRowStep;
      if (kTotal % kT != 0 && row >= ROWS) break;
      const unsigned dst = smem_tile + static_cast<unsigned>(L::offset(row, col));
      if constexpr (kCheckRows) {
        const bool pred = row < rows_valid;
        cp_async<kVec>(dst, pred ? src0 + i * step : gmem, pred);  // masked rows read nothing, in bounds
      } else {
        cp_async<kVec>(dst, src0 + i * step, true);
      }
    }
  } else if constexpr (kPerRow % kT == 0) {
    // a row is longer than one pass of the block: each thread takes kPerRow / kT columns of every row
    constexpr int kColPasses = kPerRow / kT;
#pragma unroll(Tr::kUnrollCopy)
    for (int i = 0; i < kIters; ++i) {
      const int row = i / kColPasses;
      const int col = (tid + (i % kColPasses) * kT) * kVec;
      const unsigned dst = smem_tile + static_cast<unsigned>(L::offset(row, col));
      const bool pred = !kCheckRows || row < rows_valid;
      cp_async<kVec>(dst, gmem + (pred ? row * row_stride_bytes : 0) + col, pred);
    }
  } else {
    // generic mapping (rows whose chunk count shares no power of two with the block, e.g. D=96)
#pragma unroll(Tr::kUnrollCopy)
    for (int i = 0; i < kIters; ++i) {
      const int idx = tid + i * kT;
      if (kTotal % kT != 0 && idx >= kTotal) break;
      const int row = idx / kPerRow;
      const int col = (idx % kPerRow) * kVec;
      const bool pred = !kCheckRows || row < rows_valid;
      const unsigned dst = smem_tile + static_cast<unsigned>(L::offset(row, col));
      cp_async<kVec>(dst, gmem + (pred ? row * row_stride_bytes : 0) + col, pred);
    }
  }
}

// One CTA's work. Every array member is indexed by compile-time constants only, so after inlining the
// whole object lives in registers (ptxas reports a 0-byte stack frame).
template <class Tr>
struct FwdBlock {
  using L = typename Tr::Layout;
  using Lane = LdsmLaneAddr<L, Tr::kSwizzle>;
  static constexpr int BM = Tr::kBlockM, BN = Tr::kBlockN, MT = Tr::kMT, NF = Tr::kNF, PK = Tr::kPK;
  static constexpr int KS = Tr::kKSteps, DF = Tr::kDF, ST = Tr::kStages, DT = Tr::kDtype;

  const AttentionParams& p;
  unsigned char* smem;
  int tid, lane, wm, wn, g, t;
  int batch, head, m0, Sq, Sk;
  const char* k_gmem;
  const char* v_gmem;
  long long k_rs, v_rs;
  int n_iters, n_masked;
  unsigned smem_base, q_smem;
  unsigned rd_off, wr_off;  // stage consumed / refilled in the current iteration
  Lane q_lane, k_lane, v_lane;

  unsigned q_frag[MT][KS][4];
  float o_acc[MT][DF][4];
  float m_run[MT][2];  // running max of scale*log2(e)*s for the owned rows (g, g+8)
  float l_run[MT][2];  // this lane's partial running sum; the quad reduces it once at the end

  __device__ __forceinline__ FwdBlock(const AttentionParams& params, unsigned char* smem_) : p(params), smem(smem_) {
    tid = threadIdx.x;
    lane = tid & 31;
    const int warp = tid >> 5;
    wm = warp % Tr::kWarpsM;
    wn = warp / Tr::kWarpsM;
    g = lane >> 2;  // accumulator row within an 8-row half fragment
    t = lane & 3;   // accumulator column pair
    // Causal: the heaviest query blocks (last rows, most keys) are scheduled first to shorten the tail.
    const int m_block = Tr::kIsCausal ? static_cast<int>(gridDim.x - 1 - blockIdx.x) : static_cast<int>(blockIdx.x);
    head = blockIdx.y;
    batch = blockIdx.z;
    m0 = m_block * BM;
    Sq = p.seqlen_q;
    Sk = p.seqlen_k;
    k_gmem = static_cast<const char*>(p.k) + 2 * (batch * p.k_batch_stride + head * p.k_head_stride);
    v_gmem = static_cast<const char*>(p.v) + 2 * (batch * p.v_batch_stride + head * p.v_head_stride);
    k_rs = 2 * p.k_seq_stride;
    v_rs = 2 * p.v_seq_stride;

    // KV tiles [0, n_iters) hold every key some row of this block may see; tiles [0, n_unmasked) are
    // visible in full to every row of the block and need no mask.
    int n_lim = Sk;
    int unmasked_lim = Sk;
    if constexpr (Tr::kIsCausal) {
      n_lim = cmin(Sk, cmin(m0 + BM, Sq) + p.causal_offset);
      unmasked_lim = cmin(Sk, m0 + p.causal_offset + 1);
    }
    n_iters = n_lim > 0 ? ceil_div(n_lim, BN) : 0;
    const int n_unmasked = unmasked_lim > 0 ? cmin(unmasked_lim / BN, n_iters) : 0;
    n_masked = n_iters - n_unmasked;

    smem_base = smem_u32(smem);
    q_smem = smem_base + Tr::kQOffset;
    rd_off = 0;
    wr_off = (ST - 1) * Tr::kStageBytes;

    // Per-lane ldmatrix addressing (fragment maps in common/mma.cuh).
    // Q as the A operand: matrices (rows 0-7 | 8-15) x (k 0-7 | 8-15) -> a0..a3.
    q_lane.init(wm * Tr::kWarpRows + (lane & 7) + ((lane >> 3) & 1) * 8, lane >> 4);
    // K as the B operand (n = key, k = head dim): keys 0-7 with k 0-7 / 8-15, then keys 8-15.
    k_lane.init(wn * Tr::kWarpCols + (lane & 7) + (lane >> 4) * 8, (lane >> 3) & 1);
    // V as the B operand through .trans (k = key, n = head dim): keys 0-7 / 8-15 of dims 0-7, then 8-15.
    v_lane.init(wn * Tr::kWarpCols + (lane & 7) + ((lane >> 3) & 1) * 8, lane >> 4);

#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
      for (int df = 0; df < DF; ++df)
#pragma unroll
        for (int e = 0; e < 4; ++e) o_acc[mt][df][e] = 0.f;
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        m_run[mt][r] = neg_inf();
        l_run[mt][r] = 0.f;
      }
    }
  }

  template <bool kCheckRows>
  __device__ __forceinline__ void load_kv(unsigned stage, int nb) const {
    const int rows = Sk - nb * BN;
    load_tile<Tr, BN, kCheckRows>(stage, k_gmem + nb * BN * k_rs, k_rs, rows, tid);
    cp_async_commit();
    load_tile<Tr, BN, kCheckRows>(stage + Tr::kTileBytes, v_gmem + nb * BN * v_rs, v_rs, rows, tid);
    cp_async_commit();
  }

  // Q, then the KV tiles of the first STAGES-1 iterations; K and V of a tile are separate commit groups
  // so Q.K^T can start before V has landed.
  __device__ __forceinline__ void prologue() {
    const char* q_gmem = static_cast<const char*>(p.q) +
                         2 * (batch * p.q_batch_stride + head * p.q_head_stride + m0 * p.q_seq_stride);
    load_tile<Tr, BM, true>(q_smem, q_gmem, 2 * p.q_seq_stride, Sq - m0, tid);
    cp_async_commit();
#pragma unroll
    for (int st = 0; st < ST - 1; ++st) {
      if (st < n_iters) {
        // only the first tile (st == 0) can be partial
        if (st == 0) load_kv<true>(smem_base, n_iters - 1);
        else load_kv<false>(smem_base + st * Tr::kStageBytes, n_iters - 1 - st);
      } else {
        cp_async_commit();  // empty groups keep the wait_group arithmetic uniform
        cp_async_commit();
      }
    }
    if constexpr (Tr::kQInRegs) {
      cp_async_wait<2 * (ST - 1)>();  // the Q group is the oldest
      __syncthreads();
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int kk = 0; kk < KS; ++kk) ldmatrix_x4(q_frag[mt][kk], q_smem + q_lane.at(mt * 16, kk));
      // The Q region (inside the last stage) is first refilled in iteration 0, after its barrier.
    }
  }

  __device__ __forceinline__ void qk(float (&s)[MT][NF][4], unsigned k_stage) {
    const Lane q_l = q_lane.opaque();
    const Lane k_l = k_lane.opaque();
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int nf = 0; nf < NF; ++nf)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[mt][nf][e] = 0.f;
    if constexpr (Tr::kQInRegs) {
#pragma unroll
      for (int kk = 0; kk < KS; ++kk)
#pragma unroll
        for (int ng = 0; ng < NF / 2; ++ng) {
          unsigned b[4];
          ldmatrix_x4(b, k_stage + k_l.at(ng * 16, kk));
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) {
            mma_m16n8k16<DT>(s[mt][2 * ng], q_frag[mt][kk], b[0], b[1]);
            mma_m16n8k16<DT>(s[mt][2 * ng + 1], q_frag[mt][kk], b[2], b[3]);
          }
        }
    } else {
      // Q re-read from shared memory: nothing here is indexed by kk, so the loop may stay rolled.
#pragma unroll(Tr::kUnrollQK)
      for (int kk = 0; kk < KS; ++kk) {
        unsigned a[MT][4];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) ldmatrix_x4(a[mt], q_smem + q_l.at(mt * 16, kk));
#pragma unroll
        for (int ng = 0; ng < NF / 2; ++ng) {
          unsigned b[4];
          ldmatrix_x4(b, k_stage + k_l.at(ng * 16, kk));
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) {
            mma_m16n8k16<DT>(s[mt][2 * ng], a[mt], b[0], b[1]);
            mma_m16n8k16<DT>(s[mt][2 * ng + 1], a[mt], b[2], b[3]);
          }
        }
      }
    }
  }

  __device__ __forceinline__ void iteration(int it) {
    const int nb = n_iters - 1 - it;

    // K of this tile has landed (its V and later tiles may still be in flight); the barrier also
    // retires every warp's reads of the stage refilled just below.
    cp_async_wait<2 * ST - 3>();
    __syncthreads();
    if (it + ST - 1 < n_iters) {
      load_kv<false>(smem_base + wr_off, nb - (ST - 1));  // never the partial tile
    } else {
      cp_async_commit();
      cp_async_commit();
    }

    const unsigned k_stage = smem_base + rd_off;
    float s[MT][NF][4];
    qk(s, k_stage);  // raw scores; the scale is folded into the exponent below

    // Only the partial last tile and the causal diagonal tiles (the first n_masked iterations) take
    // this warp-uniform branch. One loop with a runtime test rather than two specialised copies: with
    // two loops the second loop's hoisted state stays live through the first and pushes the large
    // configurations (D=128, BLOCK_M=128) into spills.
    if (it < n_masked) {
      const int col0 = nb * BN + wn * Tr::kWarpCols + 2 * t;
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          int lim = Sk;
          if constexpr (Tr::kIsCausal) {
            const int row = m0 + wm * Tr::kWarpRows + mt * 16 + g + 8 * r;
            lim = cmin(Sk, row + p.causal_offset + 1);
          }
#pragma unroll
          for (int nf = 0; nf < NF; ++nf)
#pragma unroll
            for (int e = 0; e < 2; ++e)
              if (col0 + nf * 8 + e >= lim) s[mt][nf][2 * r + e] = neg_inf();
        }
    }

    // Online softmax. A row whose max is still -inf (no visible key yet) uses 0 as its reference, so
    // exp2(-inf - ref) gives 0 rather than NaN.
    const float scale_log2 = p.scale_log2;
    float alpha[MT][2];
    bool rescale = false;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float mx = neg_inf();
#pragma unroll
        for (int nf = 0; nf < NF; ++nf) mx = fmaxf(mx, fmaxf(s[mt][nf][2 * r], s[mt][nf][2 * r + 1]));
        mx = group_allreduce_max<4>(mx);
        const float m_new = fmaxf(m_run[mt][r], mx * scale_log2);
        const float m_ref = m_new == neg_inf() ? 0.f : m_new;
        alpha[mt][r] = fast_exp2(m_run[mt][r] - m_ref);
        rescale |= alpha[mt][r] != 1.f;
        m_run[mt][r] = m_new;
        float row_sum = 0.f;
#pragma unroll
        for (int nf = 0; nf < NF; ++nf)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const float pv = fast_exp2(fmaf(s[mt][nf][2 * r + e], scale_log2, -m_ref));
            s[mt][nf][2 * r + e] = pv;
            row_sum += pv;
          }
        l_run[mt][r] = l_run[mt][r] * alpha[mt][r] + row_sum;
      }
    // Once the running max settles (most tiles of a long sequence) alpha == 1 across the warp and the
    // MT*D/2 multiplies are skipped; the branch is warp-uniform.
    if (__any_sync(0xffffffffu, rescale)) {
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int df = 0; df < DF; ++df) {
          o_acc[mt][df][0] *= alpha[mt][0];
          o_acc[mt][df][1] *= alpha[mt][0];
          o_acc[mt][df][2] *= alpha[mt][1];
          o_acc[mt][df][3] *= alpha[mt][1];
        }
    }

    // P in the A-operand layout straight from the accumulator registers: k-step kk of P.V is score
    // fragments 2kk (keys 0-7 of the step) and 2kk+1 (keys 8-15).
    unsigned p_frag[MT][PK][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int kk = 0; kk < PK; ++kk) {
        p_frag[mt][kk][0] = pack_float2<DT>(s[mt][2 * kk][0], s[mt][2 * kk][1]);
        p_frag[mt][kk][1] = pack_float2<DT>(s[mt][2 * kk][2], s[mt][2 * kk][3]);
        p_frag[mt][kk][2] = pack_float2<DT>(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
        p_frag[mt][kk][3] = pack_float2<DT>(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
      }

    // O += P V once every thread's copy of this tile's V has landed.
    cp_async_wait<2 * ST - 2>();
    __syncthreads();
    const unsigned v_stage = k_stage + Tr::kTileBytes;
    const Lane v_l = v_lane.opaque();
#pragma unroll
    for (int kk = 0; kk < PK; ++kk)
#pragma unroll
      for (int dp = 0; dp < DF / 2; ++dp) {
        unsigned b[4];
        ldmatrix_x4_trans(b, v_stage + v_l.at(kk * 16, dp));
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          mma_m16n8k16<DT>(o_acc[mt][2 * dp], p_frag[mt][kk], b[0], b[1]);
          mma_m16n8k16<DT>(o_acc[mt][2 * dp + 1], p_frag[mt][kk], b[2], b[3]);
        }
      }

    constexpr unsigned kLastStage = (ST - 1) * Tr::kStageBytes;
    rd_off = rd_off == kLastStage ? 0u : rd_off + Tr::kStageBytes;
    wr_off = wr_off == kLastStage ? 0u : wr_off + Tr::kStageBytes;
  }

  __device__ __forceinline__ void epilogue() {
    // The pipeline is drained (only empty groups can be pending), so the whole buffer can be reused.
    cp_async_wait<0>();
    __syncthreads();

    constexpr float kLn2 = 0.693147180559945309f;
    float* lse_row = p.lse == nullptr ? nullptr : p.lse + (static_cast<long long>(batch) * p.heads + head) * Sq;

    if constexpr (Tr::kWarpsN == 1) {
      // Normalise, round to the output type and stage the tile in shared memory (Q's layout), so the
      // global stores below are full 16-byte, row-contiguous writes.
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const float l = group_allreduce_sum<4>(l_run[mt][r]);
          const float inv = l > 0.f ? 1.f / l : 0.f;
          const int row = wm * Tr::kWarpRows + mt * 16 + g + 8 * r;
#pragma unroll
          for (int df = 0; df < DF; ++df) {
            const unsigned packed = pack_float2<DT>(o_acc[mt][df][2 * r] * inv, o_acc[mt][df][2 * r + 1] * inv);
            *reinterpret_cast<unsigned*>(smem + L::offset(row, df * 16 + 4 * t)) = packed;
          }
          if (lse_row != nullptr && t == 0 && m0 + row < Sq)
            lse_row[m0 + row] = l > 0.f ? (m_run[mt][r] + fast_log2(l)) * kLn2 : neg_inf();
        }
    } else {
      // Merge the KV_SPLIT_WARPS partial results of each row: publish (m, l), rescale the private O to
      // the common max and 1/l_total, write it as fp32, and sum the slices while storing.
      float* red_m = reinterpret_cast<float*>(smem + Tr::kWarpsN * BM * Tr::kAccPitch);
      float* red_l = red_m + Tr::kWarpsN * BM;
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const float l = group_allreduce_sum<4>(l_run[mt][r]);
          const int row = wm * Tr::kWarpRows + mt * 16 + g + 8 * r;
          if (t == 0) {
            red_m[wn * BM + row] = m_run[mt][r];
            red_l[wn * BM + row] = l;
          }
        }
      __syncthreads();
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const int row = wm * Tr::kWarpRows + mt * 16 + g + 8 * r;
          float m_tot = neg_inf();
#pragma unroll
          for (int w = 0; w < Tr::kWarpsN; ++w) m_tot = fmaxf(m_tot, red_m[w * BM + row]);
          const float m_ref = m_tot == neg_inf() ? 0.f : m_tot;
          float l_tot = 0.f;
#pragma unroll
          for (int w = 0; w < Tr::kWarpsN; ++w) l_tot += red_l[w * BM + row] * fast_exp2(red_m[w * BM + row] - m_ref);
          const float factor = l_tot > 0.f ? fast_exp2(m_run[mt][r] - m_ref) / l_tot : 0.f;
          float* dst = reinterpret_cast<float*>(smem + (wn * BM + row) * Tr::kAccPitch);
#pragma unroll
          for (int df = 0; df < DF; ++df) {
            float2 v2;
            v2.x = o_acc[mt][df][2 * r] * factor;
            v2.y = o_acc[mt][df][2 * r + 1] * factor;
            *reinterpret_cast<float2*>(dst + df * 8 + 2 * t) = v2;
          }
          if (lse_row != nullptr && wn == 0 && t == 0 && m0 + row < Sq)
            lse_row[m0 + row] = l_tot > 0.f ? (m_tot + fast_log2(l_tot)) * kLn2 : neg_inf();
        }
    }
    __syncthreads();

    // Coalesced 16-byte stores of the rows that exist.
    char* o_gmem = static_cast<char*>(p.o) + 2 * (batch * p.o_batch_stride + head * p.o_head_stride + m0 * p.o_seq_stride);
    const long long o_rs = 2 * p.o_seq_stride;
    constexpr int kChunksPerRow = Tr::kRowBytes / 16;
    constexpr int kTotal = BM * kChunksPerRow;
    const int rows_valid = Sq - m0;
#pragma unroll
    for (int i = 0; i < ceil_div(kTotal, Tr::kThreads); ++i) {
      const int idx = tid + i * Tr::kThreads;
      if (kTotal % Tr::kThreads != 0 && idx >= kTotal) break;
      const int row = idx / kChunksPerRow;
      const int c = idx % kChunksPerRow;
      if (row < rows_valid) {
        uint4 val;
        if constexpr (Tr::kWarpsN == 1) {
          val = *reinterpret_cast<const uint4*>(smem + L::offset(row, c * 16));
        } else {
          float acc[8];
#pragma unroll
          for (int e = 0; e < 8; ++e) acc[e] = 0.f;
#pragma unroll
          for (int w = 0; w < Tr::kWarpsN; ++w) {
            const float4* src = reinterpret_cast<const float4*>(smem + (w * BM + row) * Tr::kAccPitch + c * 32);
            const float4 lo = src[0];
            const float4 hi = src[1];
            acc[0] += lo.x; acc[1] += lo.y; acc[2] += lo.z; acc[3] += lo.w;
            acc[4] += hi.x; acc[5] += hi.y; acc[6] += hi.z; acc[7] += hi.w;
          }
          val.x = pack_float2<DT>(acc[0], acc[1]);
          val.y = pack_float2<DT>(acc[2], acc[3]);
          val.z = pack_float2<DT>(acc[4], acc[5]);
          val.w = pack_float2<DT>(acc[6], acc[7]);
        }
        *reinterpret_cast<uint4*>(o_gmem + row * o_rs + c * 16) = val;
      }
    }
  }
};

}  // namespace attention_detail

// __grid_constant__: the block object keeps a reference to the parameters, which then stay in the
// constant bank instead of being copied to a local-memory stack frame.
template <class Tr>
__global__ void __launch_bounds__(Tr::kThreads, 1) attention_fwd(const __grid_constant__ AttentionParams p) {
#ifdef TUNELAB_EXPECTED_SMEM
  static_assert(Tr::kSmemBytes == TUNELAB_EXPECTED_SMEM,
                "launcher smem formula disagrees with the kernel's own layout (Traits::kSmemBytes)");
#endif
  extern __shared__ __align__(128) unsigned char tunelab_attention_smem[];
  attention_detail::FwdBlock<Tr> blk(p, tunelab_attention_smem);
  blk.prologue();
  for (int it = 0; it < blk.n_iters; ++it) blk.iteration(it);
  blk.epilogue();
}

}  // namespace tunelab
