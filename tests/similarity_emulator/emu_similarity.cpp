// Runs the real similarity kernels (csrc/kernels/similarity/topk.cuh, gram.cuh) on the CPU emulator and
// checks them against a float64 reference.
//
// Build (one kernel instance per binary):
//   g++ -std=c++17 -O1 -I shim -I ../emulator/shim -I ../emulator -I . -I <repo>/csrc/kernels
//       -DEMU_TOPK=<DTYPE,METRIC,BN,BQ,BK,WN,WQ,ST,VEC,MERGE,EPI_ROWS,MIN_BLOCKS[,MMA]> emu_similarity.cpp \
//       ../emulator/emu_runtime.cpp
//   g++ ... -DEMU_GRAM=<DTYPE,TM,TN,TK,WM,WN,ST,VEC,SYM,MIRROR> ...
// Run (top-k): ./a.out nq n d k splits chunks data seed land_late
//   data 0: gaussian; 1: small integers (exact arithmetic, many exact ties: the tie rule is checked exactly);
//   2: corpus rows in increasing order of similarity (every row beats the last: worst case for the filter);
//   3: like 0 with some NaN corpus rows; 4: every corpus row the same small integers (every key of a query ties: the
//   answer is rows 0 .. k-1).  chunks > 1 emulates the streamed path (running list merged in place);
//   chunks = 0 the unfused ablation (GEMM kernel writes the score matrix, merge kernel reads it as dense lists;
//   inner product only).
// Run (gram): ./a.out n dim seed land_late
// Prints "RESULT ok=<0|1> ..." and exits 0 when ok.
#include "emu_runtime.h"

#include <algorithm>
#include <numeric>
#include <random>

#include "similarity/gram.cuh"
#include "similarity/topk.cuh"
#include "similarity/merge_sorted.cuh"
#include "similarity/select.cuh"
#include "similarity/select_filtered.cuh"

namespace tunelab {
namespace sim {
__attribute__((aligned(1024))) unsigned char tunelab_similarity_smem[emu::kSmemCapacity];
}
}  // namespace tunelab

using namespace tunelab::sim;

// fp16/bf16 rounding of the inputs: the shared mma shim's (round to nearest even).
using tunelab::emu_detail::float_to_bf16;
using tunelab::emu_detail::float_to_half;

// A matrix stored in the kernel's element type, rows `stride` elements apart (padding never read).
struct Mat {
  int dtype, rows, cols;
  long long stride;
  std::vector<unsigned char> bytes;
  int eb() const { return dtype == kF16 || dtype == kBF16 ? 2 : 4; }
  void init(int dt, int r, int c, long long s) {
    dtype = dt;
    rows = r;
    cols = c;
    stride = s;
    bytes.assign(static_cast<size_t>(r) * s * eb() + 64, 0xee);
  }
  void set(int r, int c, float v) {
    unsigned char* at = bytes.data() + (static_cast<size_t>(r) * stride + c) * eb();
    if (dtype == kF16) {
      const uint16_t h = float_to_half(v);
      std::memcpy(at, &h, 2);
    } else if (dtype == kBF16) {
      const uint16_t h = float_to_bf16(v);
      std::memcpy(at, &h, 2);
    } else {
      std::memcpy(at, &v, 4);
    }
  }
  double get(int r, int c) const {
    const unsigned char* at = bytes.data() + (static_cast<size_t>(r) * stride + c) * eb();
    if (dtype == kF16 || dtype == kBF16) {
      uint16_t h;
      std::memcpy(&h, at, 2);
      return dtype == kF16 ? tunelab::emu_detail::half_to_float(h) : tunelab::emu_detail::bf16_to_float(h);
    }
    float f;
    std::memcpy(&f, at, 4);
    return f;
  }
};

#ifdef EMU_TOPK
using Tr = TopkTraits<EMU_TOPK>;

// MMA 2, 3 (a TMA producer): the tensor maps of the queries and of the corpus rows at corpus_base (rows of them), in
// the emulator's encoding (shim common/tma.cuh), with the launcher's boxes (csrc/launchers/similarity.cpp).
void set_tma_maps(SearchParams& sp, const Mat& Q, const Mat& C, const unsigned char* corpus_base, long long rows,
                  int d) {
  if constexpr (Tr::kTmaProducer) {
    const auto dq = tunelab::tma::encode_2d_16bit(Q.bytes.data(), Q.rows, d, Q.stride * Q.eb(),
                                                  Tr::kQueryRows / Tr::kCluster, Tr::kBlockK);
    const auto dc = tunelab::tma::encode_2d_16bit(corpus_base, rows, d, C.stride * C.eb(), Tr::kBlockN, Tr::kBlockK);
    static_assert(sizeof dq == sizeof sp.tma_queries, "a tensor map fills the parameter's 128 bytes");
    std::memcpy(sp.tma_queries, &dq, sizeof sp.tma_queries);
    std::memcpy(sp.tma_corpus, &dc, sizeof sp.tma_corpus);
  } else {
    (void)sp, (void)Q, (void)C, (void)corpus_base, (void)rows, (void)d;
  }
}
bool g_races_unchecked = false;  // some search launch ran with the race detector off (named barriers, mbarriers)

static bool ref_better(double ak, int ai, double bk, int bi) { return ak > bk || (ak == bk && ai < bi); }

int main(int argc, char** argv) {
  if (argc < 10) {
    std::fprintf(stderr, "usage: %s nq n d k splits chunks data seed land_late\n", argv[0]);
    return 2;
  }
  const int nq = std::atoi(argv[1]), n = std::atoi(argv[2]), d = std::atoi(argv[3]), k = std::atoi(argv[4]);
  const int want_splits = std::atoi(argv[5]), chunks = std::atoi(argv[6]), data = std::atoi(argv[7]);
  const unsigned seed = static_cast<unsigned>(std::atoi(argv[8]));
  emu::land_late = std::atoi(argv[9]) != 0;
  emu::smem_buffer = tunelab::sim::tunelab_similarity_smem;
  constexpr int DT = Tr::kDtype, METRIC = Tr::kMetric;
  const int pad = 16 / (DT == kF32 ? 4 : 2);  // keeps 16-byte row alignment; padding must never be read

  Mat Q, C;
  Q.init(DT, nq, d, d + pad);
  C.init(DT, n, d, d + 2 * pad);
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::uniform_int_distribution<int> small(-2, 2);
  for (int i = 0; i < nq; ++i)
    for (int j = 0; j < d; ++j) Q.set(i, j, data == 1 || data == 4 ? static_cast<float>(small(rng)) : nd(rng));
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < d; ++j) {
      float v = data == 1 ? static_cast<float>(small(rng)) : nd(rng);
      if (data == 2) v = (j == 0 ? 0.001f * static_cast<float>(i) : 0.f);  // row i: (i/1000, 0, ...)
      if (data == 3 && i % 7 == 3 && j == d / 2) v = NAN;
      if (data == 4) v = static_cast<float>((j % 5) - 2);  // every row the same: every key ties
      C.set(i, j, v);
    }
  if (data == 2)
    for (int i = 0; i < nq; ++i)
      for (int j = 0; j < d; ++j) Q.set(i, j, j == 0 ? 1.f : 0.f);

  // reference keys (float64 on the stored values)
  std::vector<double> ref_key(static_cast<size_t>(nq) * n);
  std::vector<double> cn2(n), qn2(nq);
  for (int i = 0; i < n; ++i) {
    double s = 0;
    for (int j = 0; j < d; ++j) s += C.get(i, j) * C.get(i, j);
    cn2[i] = s;
  }
  for (int q = 0; q < nq; ++q) {
    double s = 0;
    for (int j = 0; j < d; ++j) s += Q.get(q, j) * Q.get(q, j);
    qn2[q] = s;
  }
  for (int q = 0; q < nq; ++q)
    for (int i = 0; i < n; ++i) {
      double dot = 0;
      for (int j = 0; j < d; ++j) dot += Q.get(q, j) * C.get(i, j);
      double key = dot;
      if (METRIC == kCosine) key = dot / std::max(std::sqrt(cn2[i]), 1e-12);
      if (METRIC == kL2) key = 2 * dot - cn2[i];
      ref_key[static_cast<size_t>(q) * n + i] = key;
    }

  emu::register_global(Q.bytes.data(), Q.bytes.size());
  emu::register_global(C.bytes.data(), C.bytes.size());

  const int q_tiles = (nq + Tr::kBlockQ - 1) / Tr::kBlockQ;
  const int chunk_rows = (n + chunks - 1) / chunks;
  std::vector<float> out_key(static_cast<size_t>(nq) * k, 12345.f), out_score(static_cast<size_t>(nq) * k, 12345.f);
  std::vector<int> out_idx(static_cast<size_t>(nq) * k, -7);
  std::vector<long long> out_index(static_cast<size_t>(nq) * k, -7);
  std::vector<float> cand_key;
  std::vector<int> cand_idx;
  int max_splits_seen = 0;
  const long long smem = Tr::kStaticSmemBytes + topk_list_bytes(Tr::kMerge, Tr::kThreads, Tr::kBlockQ, k, Tr::kMma);
  if (smem > 227 * 1024) {  // the launcher's smem gate rejects this config for this k
    std::printf("RESULT skip smem=%lld > 227 KiB\n", smem);
    return 0;
  }
  if (Tr::kThreadLists && k > thread_list_capacity(Tr::kMerge)) {  // the launcher rejects it (topk_check_k)
    std::printf("RESULT skip k=%d > thread list capacity %d\n", k, thread_list_capacity(Tr::kMerge));
    return 0;
  }
  // the merge variant: over the search's lists (chunks > 0) with k <= 32 the sorted-list merge, as the launcher
  // picks, except for seeds 1, 4, 7, ...; otherwise (and over the dense score matrix, chunks = 0) the unsorted
  // kinds: thread lists (when k fits) for even seeds and for 16 < k <= 32 (the 32-entry kind), shared lists else
  // (the scenarios have too few candidates for the launcher's rule to pick thread lists)
  const int mkind = chunks > 0 && k <= kMergeSortedMaxK && seed % 3 != 1
                        ? kMergeSorted
                        : merge_kind(k, seed % 2 == 0 || k > 16 ? kMergeListsMinCandidates : 1, false);
  auto run_merge = [&](const MergeParams& mp) {
    const int threads = 32 * merge_kind_warps(mkind), smem_bytes = static_cast<int>(merge_smem_bytes(mkind, k));
    const uint3_ grid{static_cast<unsigned>(nq), 1, 1};
    if (mkind == kMergeLists16) emu::launch(grid, threads, smem_bytes, [&] { similarity_merge_lists<DT, METRIC, 16>(mp); });
    if (mkind == kMergeLists32) emu::launch(grid, threads, smem_bytes, [&] { similarity_merge_lists<DT, METRIC, 32>(mp); });
    if (mkind == kMergeShared8) emu::launch(grid, threads, smem_bytes, [&] { similarity_merge<DT, METRIC, 8>(mp); });
    if (mkind == kMergeShared4) emu::launch(grid, threads, smem_bytes, [&] { similarity_merge<DT, METRIC, 4>(mp); });
    if (mkind == kMergeSorted) emu::launch(grid, threads, smem_bytes, [&] { similarity_merge_sorted<DT, METRIC>(mp); });
  };
  // the merge's parameters over a dense score matrix (implicit indices), writing both outputs
  auto dense_merge_params = [&](const float* mat, int lists, int len, long long list_stride, long long pitch) {
    MergeParams mp{};
    mp.cand_key = mat;
    mp.queries = Q.bytes.data();
    mp.q_stride = Q.stride;
    mp.out_key = out_key.data();
    mp.out_idx = out_idx.data();
    mp.out_score = out_score.data();
    mp.out_index = out_index.data();
    mp.nq = nq;
    mp.d = d;
    mp.k = k;
    mp.num_lists = lists;
    mp.list_len = len;
    mp.list_stride = list_stride;
    mp.query_stride = pitch;
    mp.implicit_index = 1;
    return mp;
  };
  if (chunks == 0) {  // unfused: the GEMM kernel writes the padded score matrix, the merge kernel reads it densely
    using G = GramTraits<DT, 64, 64, (DT == kF32 ? 32 : 64), 2, 2, 2, 16, 0, 0, kEpiDot>;
    const int L = 8, len = (n + L - 1) / L;
    const long long pitch = static_cast<long long>(L) * len;
    std::vector<float> mat(static_cast<size_t>(nq) * pitch, NAN);  // NaN padding never enters
    GramParams gp{};
    gp.x = Q.bytes.data();
    gp.y = C.bytes.data();
    gp.out = mat.data();
    gp.x_stride = Q.stride;
    gp.y_stride = C.stride;
    gp.out_stride = pitch;
    gp.m = nq;
    gp.n = n;
    gp.d = d;
    gp.tiles = (n + 63) / 64;
    emu::launch(uint3_{static_cast<unsigned>(gp.tiles), static_cast<unsigned>((nq + 63) / 64), 1}, G::kThreads,
                G::kSmemBytes, [&] { similarity_gram<G>(gp); });
    run_merge(dense_merge_params(mat.data(), L, len, len, pitch));
  }
  // MERGE 6, 7: the search appends the keys that reach the bars to candidate rows
  constexpr bool kRows = topk_candidate_rows(Tr::kMerge);
  if (Tr::kNoLists) {  // MERGE=5: the search writes the dense key matrix, the select kernel takes each row's best k;
                       // MERGE 6, 7: the select takes each candidate row's best k
    if (chunks != 1 || k > kSelectMaxK) {  // the launcher and the ops take MERGE 5..7 for one corpus, k <= 32
      std::printf("RESULT skip MERGE=%d takes one corpus (chunks=%d) and k <= %d (k=%d)\n", Tr::kMerge, chunks,
                  kSelectMaxK, k);
      return 0;
    }
    const int T = (n + Tr::kBlockN - 1) / Tr::kBlockN;
    int splits = std::max(1, std::min(want_splits, T));
    const int tps = (T + splits - 1) / splits;
    splits = (T + tps - 1) / tps;
    max_splits_seen = splits;
    // MERGE 6, 7: a segment per split, then the segments' counts (in mat_idx)
    const int seg_rows = tps * Tr::kBlockN;
    const int ld = static_cast<int>(kRows ? topk_filter_ld(splits, seg_rows) : topk_dense_ld(n));
    std::vector<float> mat(static_cast<size_t>(nq) * ld, 777.f);  // padding past n (or the counts) is never read
    std::vector<int> mat_idx(kRows ? static_cast<size_t>(nq) * ld : 0, 777);
    emu::register_global(mat.data(), mat.size() * sizeof(float));
    if (kRows) {
      emu::register_global(mat_idx.data(), mat_idx.size() * sizeof(int));
      // the queries' global words (cand_key after the segments, kFilterWords) start at no bar: on the GPU every block
      // resets its queries' words at its start, before any block raises one; the shim's reset does nothing, since
      // the emulator runs the blocks one after another (shim/similarity/ptx.cuh)
      for (int q = 0; q < nq; ++q)  // (0.f: the word 0u, no bar)
        std::fill_n(&mat[static_cast<size_t>(q) * ld + static_cast<size_t>(splits) * seg_rows], kFilterWords, 0.f);
    }
    SearchParams sp{};
    sp.queries = Q.bytes.data();
    sp.corpus = C.bytes.data();
    sp.cand_key = mat.data();
    sp.cand_idx = kRows ? mat_idx.data() : nullptr;
    sp.q_stride = Q.stride;
    sp.c_stride = C.stride;
    sp.nq = nq;
    sp.n = n;
    sp.d = d;
    sp.k = k;
    sp.num_tiles = T;
    sp.tiles_per_split = tps;
    sp.dense_ld = ld;
    set_tma_maps(sp, Q, C, C.bytes.data(), n, d);
    emu::launch(uint3_{static_cast<unsigned>(q_tiles), static_cast<unsigned>(splits), 1}, Tr::kLaunchThreads,
                static_cast<int>(smem), [&] { similarity_topk<Tr>(sp); });
    g_races_unchecked |= emu::races_unchecked;
    MergeParams mp = dense_merge_params(mat.data(), 1, n, 0, ld);
    if (kRows) {
      long long appended = 0;
      for (int q = 0; q < nq; ++q)
        for (int s = 0; s < splits; ++s) appended += mat_idx[static_cast<size_t>(q) * ld + splits * seg_rows + s];
      std::printf("filtered: %lld of %lld keys appended\n", appended, static_cast<long long>(nq) * n);
      mp = dense_merge_params(mat.data(), splits, seg_rows, 0, ld);
      mp.cand_idx = mat_idx.data();
      mp.implicit_index = 0;
      emu::launch(uint3_{static_cast<unsigned>(nq), 1, 1}, 32,
                  static_cast<int>(merge_smem_bytes(kMergeFilterSelect, k)),
                  [&] { similarity_select_filtered<DT, METRIC>(mp); });
    } else {
      emu::launch(uint3_{static_cast<unsigned>(nq), 1, 1}, kSelectThreads,
                  static_cast<int>(merge_smem_bytes(kMergeSelect, k)), [&] { similarity_select<DT, METRIC>(mp); });
    }
  }
  for (int ch = 0; ch < (Tr::kNoLists ? 0 : chunks); ++ch) {
    const int r0 = ch * chunk_rows;
    const int rows = std::min(chunk_rows, n - r0);
    if (rows <= 0) break;
    const int T = (rows + Tr::kBlockN - 1) / Tr::kBlockN;
    int splits = std::max(1, std::min(want_splits, T));
    const int tps = (T + splits - 1) / splits;
    splits = (T + tps - 1) / tps;
    max_splits_seen = std::max(max_splits_seen, splits);
    const bool streamed = chunks > 1;
    const int lists = splits + (streamed ? 1 : 0);
    // the running list (list 0) survives across chunks; the split lists are rewritten per chunk
    std::vector<float> keep_key(cand_key.begin(), cand_key.begin() + std::min<size_t>(cand_key.size(), static_cast<size_t>(nq) * k));
    std::vector<int> keep_idx(cand_idx.begin(), cand_idx.begin() + std::min<size_t>(cand_idx.size(), static_cast<size_t>(nq) * k));
    cand_key.assign(static_cast<size_t>(lists) * nq * k, 777.f);
    cand_idx.assign(static_cast<size_t>(lists) * nq * k, 777);
    if (streamed) {
      for (size_t i = 0; i < static_cast<size_t>(nq) * k; ++i) {
        cand_key[i] = ch == 0 ? -INFINITY : keep_key[i];
        cand_idx[i] = ch == 0 ? -1 : keep_idx[i];
      }
    }
    SearchParams sp{};
    sp.queries = Q.bytes.data();
    sp.corpus = C.bytes.data() + static_cast<size_t>(r0) * C.stride * C.eb();
    sp.cand_key = cand_key.data();
    sp.cand_idx = cand_idx.data();
    sp.q_stride = Q.stride;
    sp.c_stride = C.stride;
    sp.index_base = r0;
    sp.nq = nq;
    sp.n = rows;
    sp.d = d;
    sp.k = k;
    sp.num_tiles = T;
    sp.tiles_per_split = tps;
    sp.list_offset = streamed ? 1 : 0;
    set_tma_maps(sp, Q, C, static_cast<const unsigned char*>(sp.corpus), rows, d);
    emu::launch(uint3_{static_cast<unsigned>(q_tiles), static_cast<unsigned>(splits), 1}, Tr::kLaunchThreads,
                static_cast<int>(smem), [&] { similarity_topk<Tr>(sp); });
    g_races_unchecked |= emu::races_unchecked;

    MergeParams mp{};
    mp.cand_key = cand_key.data();
    mp.cand_idx = cand_idx.data();
    mp.queries = Q.bytes.data();
    mp.q_stride = Q.stride;
    mp.nq = nq;
    mp.d = d;
    mp.k = k;
    mp.num_lists = lists;
    mp.list_len = k;
    mp.list_stride = static_cast<long long>(nq) * k;
    mp.query_stride = k;
    const bool last = ch == chunks - 1 || r0 + rows >= n;
    if (streamed && !last) {
      mp.out_key = cand_key.data();  // in place: list 0 is the running list
      mp.out_idx = cand_idx.data();
    } else {
      mp.out_key = out_key.data();
      mp.out_idx = out_idx.data();
      mp.out_score = out_score.data();
      mp.out_index = out_index.data();
    }
    run_merge(mp);
    if (last) break;
  }

  // ---- checks
  const bool exact = (data == 1 || data == 4) && METRIC != kCosine;  // exact arithmetic: the tie rule must hold exactly
  long long bad_order = 0, bad_key = 0, bad_set = 0, bad_exact = 0, bad_score = 0, dup = 0;
  double max_key_err = 0;
  std::vector<int> order(n);
  for (int q = 0; q < nq; ++q) {
    const double* rk = &ref_key[static_cast<size_t>(q) * n];
    std::iota(order.begin(), order.end(), 0);
    std::vector<int> valid;
    for (int i : order)
      if (!std::isnan(rk[i])) valid.push_back(i);
    std::sort(valid.begin(), valid.end(), [&](int a, int b) { return ref_better(rk[a], a, rk[b], b); });
    const int have = std::min<int>(k, static_cast<int>(valid.size()));
    double scale = 1e-30;
    for (int i : valid) scale = std::max(scale, std::fabs(rk[i]));
    double mag = 0;  // size of the terms: what fp32 rounding error scales with
    for (int j = 0; j < d; ++j) mag = std::max(mag, std::fabs(Q.get(q, j)));
    const double tol = exact ? 0.0 : 2e-5 * std::max(scale, 1.0) * (DT == kF32 ? 1.0 : 1.0);
    const double kth = have > 0 ? rk[valid[have - 1]] : -INFINITY;
    std::vector<char> seen(n, 0);
    for (int r = 0; r < k; ++r) {
      const int ix = out_idx[static_cast<size_t>(q) * k + r];
      const float key = out_key[static_cast<size_t>(q) * k + r];
      const long long ix64 = out_index[static_cast<size_t>(q) * k + r];
      if (ix64 != ix) ++bad_score;
      if (r >= have) {
        if (ix != -1) ++bad_set;
        continue;
      }
      if (ix < 0 || ix >= n) {
        ++bad_set;
        continue;
      }
      if (seen[ix]++) ++dup;
      const double err = std::fabs(key - rk[ix]);
      max_key_err = std::max(max_key_err, err);
      if (err > tol) ++bad_key;
      if (rk[ix] < kth - 2 * tol) ++bad_set;
      if (exact && ix != valid[r]) ++bad_exact;
      if (r > 0) {
        const int pix = out_idx[static_cast<size_t>(q) * k + r - 1];
        const float pkey = out_key[static_cast<size_t>(q) * k + r - 1];
        if (!(pkey > key || (pkey == key && pix < ix))) ++bad_order;  // the kernel's own order must be total
      }
      // user-facing score
      double want = key;
      if (METRIC == kCosine) want = key / std::max(std::sqrt(qn2[q]), 1e-12);
      if (METRIC == kL2) want = std::max(qn2[q] - key, 0.0);
      const float got = out_score[static_cast<size_t>(q) * k + r];
      if (!(std::fabs(got - want) <= 1e-4 * std::max(1.0, std::fabs(want)))) ++bad_score;
    }
    // everything clearly above the k-th must be present
    for (int r = 0; r < have; ++r) {
      const int ix = valid[r];
      if (rk[ix] > kth + 2 * tol && !seen[ix]) ++bad_set;
    }
    (void)mag;
  }
  const bool ok = bad_order == 0 && bad_key == 0 && bad_set == 0 && bad_exact == 0 && bad_score == 0 && dup == 0 &&
                  emu::stats.races == 0 && emu::stats.oob == 0;
  std::printf(
      "RESULT ok=%d max_key_err=%.3g bad_order=%lld bad_key=%lld bad_set=%lld bad_exact=%lld bad_score=%lld dup=%lld "
      "races=%s oob=%lld splits=%d smem=%lld\n",
      ok ? 1 : 0, max_key_err, bad_order, bad_key, bad_set, bad_exact, bad_score, dup,
      g_races_unchecked ? "unchecked" : std::to_string(emu::stats.races).c_str(), emu::stats.oob, max_splits_seen,
      smem);
  return ok ? 0 : 1;
}
#endif  // EMU_TOPK

#ifdef EMU_GRAM
using Tr = GramTraits<EMU_GRAM>;

int main(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr, "usage: %s n dim seed land_late\n", argv[0]);
    return 2;
  }
  const int n = std::atoi(argv[1]), dim = std::atoi(argv[2]);
  const unsigned seed = static_cast<unsigned>(std::atoi(argv[3]));
  emu::land_late = std::atoi(argv[4]) != 0;
  emu::smem_buffer = tunelab::sim::tunelab_similarity_smem;
  constexpr int DT = Tr::kDtype;
  const int d = Tr::kComplex ? 2 * dim : dim;  // real scalars per row
  const int pad = 16 / (DT == kF16 || DT == kBF16 ? 2 : 4);
  Mat X;
  X.init(DT == kC64 ? kF32 : DT, n, d, d + pad);
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < d; ++j) X.set(i, j, nd(rng));
  emu::register_global(X.bytes.data(), X.bytes.size());
  const long long ostride = n + 3;
  std::vector<float> out(static_cast<size_t>(n) * ostride, NAN);

  GramParams gp{};
  gp.x = X.bytes.data();
  gp.y = X.bytes.data();
  gp.out = out.data();
  gp.x_stride = X.stride;
  gp.y_stride = X.stride;
  gp.out_stride = ostride;
  gp.m = n;
  gp.n = n;
  gp.d = d;
  uint3_ grid;
  if (Tr::kSymmetric) {
    const int T = (n + Tr::kTileM - 1) / Tr::kTileM;
    gp.tiles = T;
    grid = {static_cast<unsigned>(T * (T + 1) / 2), 1, 1};
  } else {
    gp.tiles = (n + Tr::kTileN - 1) / Tr::kTileN;
    grid = {static_cast<unsigned>(gp.tiles), static_cast<unsigned>((n + Tr::kTileM - 1) / Tr::kTileM), 1};
  }
  emu::launch(grid, Tr::kThreads, Tr::kSmemBytes, [&] { similarity_gram<Tr>(gp); });

  long long bad = 0, unwritten = 0, stray = 0;
  double max_rel = 0;
  for (int i = 0; i < n; ++i) {
    for (long long j = 0; j < ostride; ++j) {
      const float got = out[static_cast<size_t>(i) * ostride + j];
      const bool should = j < n && (!Tr::kSymmetric || Tr::kMirror || j >= i);
      if (!should) {
        if (!std::isnan(got)) ++stray;
        continue;
      }
      if (std::isnan(got)) {
        ++unwritten;
        continue;
      }
      double re = 0, im = 0, mag = 0;
      if (Tr::kComplex) {
        for (int c = 0; c < dim; ++c) {
          const double ar = X.get(i, 2 * c), ai = X.get(i, 2 * c + 1);
          const double br = X.get(static_cast<int>(j), 2 * c), bi = X.get(static_cast<int>(j), 2 * c + 1);
          re += ar * br + ai * bi;  // conj(a) * b
          im += ar * bi - ai * br;
          mag += std::hypot(ar, ai) * std::hypot(br, bi);
        }
      } else {
        for (int c = 0; c < d; ++c) {
          re += X.get(i, c) * X.get(static_cast<int>(j), c);
          mag += std::fabs(X.get(i, c) * X.get(static_cast<int>(j), c));
        }
      }
      const double want = re * re + im * im;
      // error of |z|^2 from an error e in z: ~2 |z| e, with e ~ 1e-6 * sum |a||b|
      const double tol = 1e-5 * (2 * std::sqrt(want) * mag + mag * mag * 1e-6) + 1e-6;
      const double err = std::fabs(got - want);
      max_rel = std::max(max_rel, err / std::max(want, 1e-3));
      if (err > tol) ++bad;
    }
  }
  const bool ok = bad == 0 && unwritten == 0 && stray == 0 && emu::stats.races == 0 && emu::stats.oob == 0;
  std::printf("RESULT ok=%d max_rel=%.3g bad=%lld unwritten=%lld stray=%lld races=%lld oob=%lld smem=%d\n", ok ? 1 : 0,
              max_rel, bad, unwritten, stray, emu::stats.races, emu::stats.oob, Tr::kSmemBytes);
  return ok ? 0 : 1;
}
#endif  // EMU_GRAM
