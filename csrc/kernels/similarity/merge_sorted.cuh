// The merge of sorted candidate lists for k <= 32 (merge kind kMergeSorted): one warp per query.
//
// The search leaves, per split and query, a list of k candidates sorted best first (missing entries, index -1,
// last); streamed chunks add the running list of earlier chunks, sorted too. The general merges (shared lists,
// thread lists) offer every one of the splits x k candidates to a running top-k: on the H200 at nq = 100 over 131
// lists of 10 that took 15-16 us, as much as a third of the search at N = 50K. Sorted lists allow a bound first:
//
//   1. Every lane takes the heads (best entries) of lists lane, lane + 32, ... and keeps their maximum. The k-th
//      largest of the 32 lane maxima, T, is at most the k-th best candidate overall: the k lanes holding the
//      largest maxima supply k distinct candidates >= T. (Fewer than k lanes with a list: T = -inf.)
//   2. Only a list whose head is >= T can hold an entry >= T. The warp walks those lists ("hot": about k of them
//      when T is tight, each list's k entries loaded by k lanes at once, 32 / k lists per load) and keeps the
//      entries >= T; at 131 lists of 10 that is ~10-20 entries instead of 1310.
//   3. Kept entries gather in shared memory; every 32 of them are sorted across the warp (bitonic) and merged
//      into the running top 32 (one entry per lane, lane 0 the best), whose k-th entry then raises T.
//
// The tie rule is the family's (better(): larger key, or equal with a smaller index): entries equal to T are kept,
// so the exact rule decides among them. NaN keys never enter (the search's lists hold none; a missing entry is
// skipped by its index). Shared memory: merge_smem_bytes(kMergeSorted, k) in params.cuh: 64 kept entries (8
// bytes each), 32 x kSortedMergeRounds hot-list ids, 16 bytes for |q|^2.
#pragma once

#include "similarity/topk.cuh"  // MergeParams' helpers: load_candidate, write_merged, stash_query_norm2

namespace tunelab {
namespace sim {

// Compare-exchange of one (key, index) pair per lane with lane ^ stride: the lane keeps the better pair when
// keep_better, else the worse (equal pairs, the empty sentinels, are the same either way).
__device__ __forceinline__ void warp_cas_pair(float& key, int& idx, int stride, bool keep_better) {
  const float ok = shfl_xor_f(key, stride);
  const int oi = shfl_xor_i(idx, stride);
  if (better(ok, oi, key, idx) == keep_better) {
    key = ok;
    idx = oi;
  }
}

// Bitonic sort of one pair per lane across the warp, best first (lane 0 the best).
__device__ __forceinline__ void warp_sort_pairs(float& key, int& idx, int lane) {
#pragma unroll
  for (int size = 2; size <= 32; size <<= 1) {
#pragma unroll
    for (int stride = size >> 1; stride > 0; stride >>= 1)
      warp_cas_pair(key, idx, stride, ((lane & stride) == 0) == ((lane & size) == 0));
  }
}

// (rk, ri): the best 32 of the running list (sorted, one pair per lane) and the sorted pairs (ck, ci): the
// running list against the other reversed, pairwise better (a bitonic sequence holding the best 32 of the
// union), then a bitonic merge.
__device__ __forceinline__ void warp_merge_sorted_pairs(float& rk, int& ri, float ck, int ci, int lane) {
  const float rev_k = shfl_f(ck, 31 - lane);
  const int rev_i = shfl_i(ci, 31 - lane);
  if (better(rev_k, rev_i, rk, ri)) {
    rk = rev_k;
    ri = rev_i;
  }
#pragma unroll
  for (int stride = 16; stride > 0; stride >>= 1) warp_cas_pair(rk, ri, stride, (lane & stride) == 0);
}

// A warp's kept entries (shared memory bkey / bidx, `kept` of them, uniform over the warp): every lane whose `keep`
// holds appends its (key, ix), in lane order.
__device__ __forceinline__ void warp_keep(bool keep, float key, int ix, float* bkey, int* bidx, int& kept,
                                          int lane) {
  const unsigned keep_mask = ballot(keep);
  if (keep) {
    const int at = kept + popc(keep_mask & lanemask_lt(lane));
    sts(bkey + at, key);
    sts(bidx + at, ix);
  }
  kept += popc(keep_mask);
}

// The answer from a warp's running top 32 (rk, ri: best first, one pair per lane): lane r < k writes query q's entry
// r (write_merged(): a missing entry (-inf, INT_MAX) has no index), with |q|^2 from qnorm for cosine and l2.
template <int METRIC>
__device__ __forceinline__ void warp_write_top(const MergeParams& p, int q, const float* qnorm, float rk, int ri,
                                               int k, int lane) {
  float qn2 = 0.f;
  if constexpr (METRIC != kIP) qn2 = lds(qnorm);
  if (lane < k) write_merged<METRIC>(p, q, lane, ri != 0x7fffffff, rk, ri, qn2);
}

// Kept entries bkey / bidx[0 .. count) (count <= 32), sorted across the warp, into the running top 32 (rk, ri: one
// pair per lane, best first); once it holds k entries its k-th raises `bound` (nothing below it enters).
__device__ __forceinline__ void warp_merge_kept(const float* bkey, const int* bidx, int count, float& rk,
                                                int& ri, float& bound, int k, int lane) {
  syncwarp();
  float ck = lane < count ? lds(bkey + lane) : -f32_inf();
  int ci = lane < count ? lds(bidx + lane) : 0x7fffffff;
  warp_sort_pairs(ck, ci, lane);
  warp_merge_sorted_pairs(rk, ri, ck, ci, lane);
  const float kth = shfl_f(rk, k - 1);
  if (shfl_i(ri, k - 1) != 0x7fffffff) bound = fmaxf(bound, kth);
}

// The head (best entry) of list l of query q, or NaN where there is no list l (l >= L) or its head is missing:
// NaN is never hot and fmaxf passes it by.
__device__ __forceinline__ float list_head(const MergeParams& p, int q, int l, int L) {
  float key = f32_nan();
  int ix;
  if (l < L) load_candidate(p, q, l, 0, key, ix);  // (NaN, -1) for a missing entry
  return key;
}

// Lists whose heads a lane keeps in registers from the bound to the hot-list pass (lists up to 32 x this: one
// batch; more lists are walked in batches of as many, their heads read again).
constexpr int kSortedMergeRounds = kSortedMergeHotIds / 32;
// Entries each lane loads before it filters them (independent loads in flight).
constexpr int kSortedMergeLoads = 8;

template <int DTYPE, int METRIC>
__global__ void __launch_bounds__(32) similarity_merge_sorted(const __grid_constant__ MergeParams p) {
  constexpr int R = kSortedMergeRounds, U = kSortedMergeLoads;
  pdl_wait_prior_grid();  // a programmatic launch after the search: its lists are complete from here on
  extern __shared__ __align__(16) unsigned char tunelab_similarity_smem[];
  constexpr int KEPT = kSortedMergeKept;
  float* bkey = reinterpret_cast<float*>(tunelab_similarity_smem);  // [KEPT] kept entries not yet merged
  int* bidx = reinterpret_cast<int*>(bkey + KEPT);                   // [KEPT]
  int* hot = bidx + KEPT;                                            // [32 R] hot lists of one batch
  float* qnorm = reinterpret_cast<float*>(hot + 32 * R);
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const int q = static_cast<int>(blockIdx.x);
  const int k = p.k;  // the launcher keeps k <= 32 for this kind
  const int L = p.num_lists;

  stash_query_norm2<DTYPE, METRIC>(p, q, true, lane, qnorm);  // its loads overlap the heads'

  // 1. the bound: k-th largest of the lane maxima of the list heads (the first batch's heads stay in registers)
  float head[R];
  float head_max = -f32_inf();
#pragma unroll
  for (int j = 0; j < R; ++j) head[j] = list_head(p, q, lane + 32 * j, L);
  for (int l = lane + 32 * R; l < L; l += 32) head_max = fmaxf(head_max, list_head(p, q, l, L));
#pragma unroll
  for (int j = 0; j < R; ++j) head_max = fmaxf(head_max, head[j]);
  float bound = warp_kth_largest(head_max, k, lane);

  // 2 + 3. per batch of 32 R lists: the hot ones' ids to hot[], then their entries, U loads per lane at a time
  float rk = -f32_inf();  // running top 32, best first; empty: (-inf, INT_MAX), which every candidate beats
  int ri = 0x7fffffff;
  int kept = 0;  // entries in bkey / bidx (uniform over the warp)
  for (int batch = 0; batch < L; batch += 32 * R) {
    int hot_count = 0;
    syncwarp();  // the previous batch's readers of hot[] are done
#pragma unroll
    for (int j = 0; j < R; ++j) {
      const int l = batch + 32 * j + lane;
      const float key = batch == 0 ? head[j] : list_head(p, q, l, L);  // later batches read their heads again
      const bool is_hot = key >= bound;  // false for NaN
      const unsigned mask = ballot(is_hot);
      if (is_hot) sts(hot + hot_count + popc(mask & lanemask_lt(lane)), l);
      hot_count += popc(mask);
    }
    syncwarp();
    const int entries = hot_count * k;
    for (int e0 = 0; e0 < entries; e0 += 32 * U) {
      float key[U];
      int ix[U];
#pragma unroll
      for (int u = 0; u < U; ++u) {  // U independent loads in flight
        const int e = e0 + 32 * u + lane;
        key[u] = f32_nan();
        ix[u] = -1;
        if (e < entries) {
          const int h = e / k;
          load_candidate(p, q, lds(hot + h), e - h * k, key[u], ix[u]);
        }
      }
#pragma unroll
      for (int u = 0; u < U; ++u) {
        warp_keep(key[u] >= bound, key[u], ix[u], bkey, bidx, kept, lane);  // (false for NaN: no entry)
        if (kept >= 32) {
          warp_merge_kept(bkey, bidx, 32, rk, ri, bound, k, lane);
          syncwarp();  // every lane has read entries 0..31
          if (lane < kept - 32) {
            sts(bkey + lane, lds(bkey + 32 + lane));
            sts(bidx + lane, lds(bidx + 32 + lane));
          }
          syncwarp();  // entries 32.. are read before the next entries overwrite them
          kept -= 32;
        }
      }
    }
  }
  if (kept > 0) warp_merge_kept(bkey, bidx, kept, rk, ri, bound, k, lane);

  syncwarp();
  warp_write_top<METRIC>(p, q, qnorm, rk, ri, k, lane);
}

}  // namespace sim
}  // namespace tunelab
