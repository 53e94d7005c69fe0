// The top k of each query's candidate row after a MERGE=6 search (merge kind kMergeFilterSelect), k <= 32: one warp
// per query.
//
// The filtered search appends to a query's row, per split, the keys that reach its bars (a segment of list_len
// entries per split, the count of segment s at cand_idx[num_lists * list_len + s], the indices in cand_idx at the
// keys' places; params.cuh topk_candidate_rows()). With its tile-maximum words that is ~50 keys a query at 50K / 100,
// spread over 131 segments, so the time past the search is the chain of dependent reads, not their volume:
//
//   1. The warp reads the query's bar words after the segments: the global bar and the k tile-maximum words
//      (TopkBlock::global_bar()), in flight with step 2's first loads. B, the larger of the global bar and the
//      smallest tile-maximum word (no bar while one reads 0), bounds the answer: k appended keys are at least as
//      large (TopkBlock::filter_bound_pass() says why), so nothing below B is in the top k. The search has
//      finished raising the words: this is the tightest bar it knew.
//   2. Every lane reads the counts of segments lane, lane + 32, ... (32 x kFilterSelectSegs a round), loads the
//      first kFilterSelectLoads entries of each of them at once (keys and indices: one more round trip), then the
//      rest of any longer segment the same way, and keeps the entries >= B (ties pass: the tie rule decides among
//      them) in shared memory; when the buffer fills, and at the end, B first rises to the k-th largest of the
//      lanes' maxima over the kept entries and they are compacted to those that reach it, then every 32 kept are
//      sorted across the warp and merged into the running top 32 (merge_sorted.cuh), whose k-th entry then raises B.
//   3. Lane r < k writes entry r (missing entries, fewer than k keys that are not NaN: (-inf or +inf, -1)).
//
// What it measured against the forms before it (the block select, the fused form behind a grid barrier, the lanes'
// maxima bound, loads of counts and entries in one round trip), with commits and result files: SIMILARITY.md's
// "Tile-maximum words and the filtered select" and "The filtered select's time". The programmatic launch already
// hides this kernel's start; what it costs is its own chain of dependent reads.
//
// The tie rule is the family's (better(): larger key, or equal with a smaller index). NaN keys never pass B.
// Counts are clamped to the segment (0 .. list_len). Shared memory: merge_smem_bytes(kMergeFilterSelect, k) in
// params.cuh: kFilterSelectKept kept entries (8 bytes each), the round's counts, 16 bytes for |q|^2.
#pragma once

#include "similarity/merge_sorted.cuh"  // warp_keep, warp_merge_kept, warp_write_top; MergeParams' helpers

namespace tunelab {
namespace sim {

// The diagnosis build (TUNELAB_SIM_SELECT_TRACE, benchmarks/similarity_select_trace.py --variant filtered|warps):
// lane 0 of each warp stamps %globaltimer at its entry, the prior grid's end, the bar known (step 1), the first
// loads of every segment offered, the rest of the longer segments offered, the kept entries merged, the answer
// written; an eighth word holds the entries kept (low 32 bits) and the later loads' rounds (high 32 bits). It
// writes them over the first 16 entries of segment 0 of the query's row once done (the next search's appends
// rewrite what it reads: entries below the segment's count).
constexpr int kFilterSelectTraceStamps = 8;

// One warp's select of query q's candidate row (steps 1-3 above) into p's outputs. Shared memory at smem:
// select_filtered_smem_bytes(J, KEPT) bytes (params.cuh: the kept entries, the round's counts; not qnorm, which the
// caller filled: stash_query_norm2()). J segments a lane per round, U first loads each, KEPT entries buffered.
template <int DTYPE, int METRIC, int J, int U, int KEPT>
__device__ __forceinline__ void select_filtered_query(const MergeParams& p, int q, int lane, unsigned char* smem,
                                                      const float* qnorm, unsigned long long t_entry = 0,
                                                      unsigned long long t_wait = 0) {
  static_assert(KEPT >= 32 * (J * U + 1), "a round's first loads and a partial chunk fit the buffer");
  unsigned long long stamp[kFilterSelectTraceStamps] = {t_entry, t_wait};  // (trace build)
  int kept_total = 0, later_rounds = 0;  // (trace build)
  float* bkey = reinterpret_cast<float*>(smem);  // [KEPT] kept entries not yet merged
  int* bidx = reinterpret_cast<int*>(bkey + KEPT);  // [KEPT]
  int* seg_cnt = bidx + KEPT;                       // [J][32] the round's counts, lane-major
  const int k = p.k;  // the launcher keeps k <= 32 for this kind
  const int segs = p.num_lists, seg_len = p.list_len;
  const float* row = p.cand_key + static_cast<long long>(q) * p.query_stride;
  const int* row_idx = p.cand_idx + static_cast<long long>(q) * p.query_stride;
  const long long after = static_cast<long long>(segs) * seg_len;  // the counts (cand_idx) and bar words (cand_key)

  // 1. the bar: the global bar (every lane: one load) and the smallest of the k tile-maximum words (lane j < k the
  // word j; 0: not raised, no bar)
  const unsigned* words = reinterpret_cast<const unsigned*>(row + after);
  const unsigned global = words[0];
  unsigned smallest = lane < k ? words[kFilterTileWord0 + lane] : 0xffffffffu;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const unsigned other = shfl_xor_u(smallest, o);
    smallest = other < smallest ? other : smallest;
  }
  float bound = fmaxf(ordered_float(global), ordered_float(smallest));
  stamp[2] = select_clock();

  // 2. the entries >= the bar to the buffer; every 32 of them sorted into the running top 32 once the buffer fills,
  // and at the end (one rolled loop: each inlined copy of the sort is ~200 instructions)
  float rk = -f32_inf();  // running top 32, best first; empty: (-inf, INT_MAX), which every candidate beats
  int ri = 0x7fffffff;
  int kept = 0;  // entries in bkey / bidx (uniform over the warp)
  auto offer = [&](bool have, float key, int ix) {  // collective: every lane, one entry or none
    warp_keep(have && key >= bound, key, ix, bkey, bidx, kept, lane);  // (false for NaN)
  };
  auto merge_kept = [&]() {  // the whole buffer into the running list, 32 entries at a time
    kept_total += kept;  // (trace build: every kept entry is merged once)
    if (kept > 32) {
      // First a bar from the lanes' maxima (lane l's of entries l, l + 32, ...): k of them, from k lanes, reach the
      // k-th largest, so nothing below it is in the top k. One sort of 32 maxima, then the entries that reach it
      // (ties pass) are compacted in place: most of the chunks' sorts fall away (at 50K / 100 up to ~170 kept
      // entries a query, 6 sorts; results/similarity_select_trace_warps_h200.json).
      syncwarp();  // every lane's kept entries are written
      float m = -f32_inf();
      for (int i = lane; i < kept; i += 32) m = fmaxf(m, lds(bkey + i));  // (kept entries are never NaN)
      bound = fmaxf(bound, warp_kth_largest(m, k, lane));
      int n = 0;
      for (int b = 0; b < kept; b += 32) {
        const int i = b + lane;
        const float key = i < kept ? lds(bkey + i) : -f32_inf();
        const int ix = i < kept ? lds(bidx + i) : 0;
        syncwarp();  // the chunk is read before the compaction writes into it (at or below its entries)
        warp_keep(i < kept && key >= bound, key, ix, bkey, bidx, n, lane);
      }
      syncwarp();
      kept = n;
    }
    for (int b = 0; b < kept; b += 32)
      warp_merge_kept(bkey + b, bidx + b, kept - b < 32 ? kept - b : 32, rk, ri, bound, k, lane);
    syncwarp();  // every lane has read the buffer before it refills
    kept = 0;
  };
  for (int s0 = 0; s0 < segs; s0 += 32 * J) {
    if (kept > KEPT - 32 * J * U) merge_kept();
    int cnt[J];
#pragma unroll
    for (int j = 0; j < J; ++j) {
      const int s = s0 + 32 * j + lane;
      const int c = s < segs ? row_idx[after + s] : 0;
      cnt[j] = c < 0 ? 0 : c < seg_len ? c : seg_len;
      sts(seg_cnt + 32 * j + lane, cnt[j]);  // (a lane reads back only its own)
    }
    float key[J][U] = {};
    int ix[J][U] = {};
#pragma unroll
    for (int j = 0; j < J; ++j)
#pragma unroll
      for (int u = 0; u < U; ++u)
        if (u < cnt[j]) {  // every load of the round in flight together
          const long long e = static_cast<long long>(s0 + 32 * j + lane) * seg_len + u;
          key[j][u] = row[e];
          ix[j][u] = row_idx[e];
        }
#pragma unroll
    for (int j = 0; j < J; ++j)
#pragma unroll
      for (int u = 0; u < U; ++u) offer(u < cnt[j], key[j][u], ix[j][u]);
    stamp[3] = select_clock();
    // the rest of the longer segments (rare: ~0.3 entries a segment at 50K / 100), U entries of one at a time
    for (int j = 0; j < J; ++j) {
      const int c = lds(seg_cnt + 32 * j + lane);
      const long long e0 = static_cast<long long>(s0 + 32 * j + lane) * seg_len;
      for (int o = U; __any_sync(0xffffffffu, o < c); o += U) {
        if (kept > KEPT - 32 * U) merge_kept();
        ++later_rounds;
        float v[U] = {};
        int vi[U] = {};
#pragma unroll
        for (int u = 0; u < U; ++u)
          if (o + u < c) v[u] = row[e0 + o + u], vi[u] = row_idx[e0 + o + u];
#pragma unroll
        for (int u = 0; u < U; ++u) offer(o + u < c, v[u], vi[u]);
      }
    }
  }
  stamp[4] = select_clock();
  merge_kept();
  stamp[5] = select_clock();

  // 3. the answer
  warp_write_top<METRIC>(p, q, qnorm, rk, ri, k, lane);
#ifdef TUNELAB_SIM_SELECT_TRACE
  syncwarp();  // every lane's reads of the row are done
  stamp[6] = select_clock();
  stamp[7] = static_cast<unsigned>(kept_total) | static_cast<unsigned long long>(later_rounds) << 32;
  if (lane == 0 && seg_len >= 2 * kFilterSelectTraceStamps)
    for (int i = 0; i < kFilterSelectTraceStamps; ++i)
      reinterpret_cast<unsigned long long*>(const_cast<float*>(row))[i] = stamp[i];
#else
  (void)stamp;
  (void)kept_total;
  (void)later_rounds;
#endif
}

template <int DTYPE, int METRIC>
__global__ void __launch_bounds__(32) similarity_select_filtered(const __grid_constant__ MergeParams p) {
  constexpr int J = kFilterSelectSegs, KEPT = kFilterSelectKept;
  extern __shared__ __align__(16) unsigned char tunelab_similarity_smem[];
  float* qnorm = reinterpret_cast<float*>(tunelab_similarity_smem + select_filtered_smem_bytes(J, KEPT));
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const int q = static_cast<int>(blockIdx.x);
  const unsigned long long t_entry = select_clock();
  stash_query_norm2<DTYPE, METRIC>(p, q, true, lane, qnorm);  // the queries are the search's input, not its output
  pdl_wait_prior_grid();  // a programmatic launch after the search: its rows are complete from here on
  select_filtered_query<DTYPE, METRIC, J, kFilterSelectLoads, KEPT>(p, q, lane, tunelab_similarity_smem, qnorm,
                                                                      t_entry, select_clock());
}

}  // namespace sim
}  // namespace tunelab
