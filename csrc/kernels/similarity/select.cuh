// The top-k of each row of a dense key matrix (merge kind kMergeSelect): one block of kSelectThreads threads per
// query. The search with MERGE=5 writes every key of the nq x N matrix (no running top-k) and, after each row's keys,
// the largest key of every group of kDenseGroup = 16 rows (params.cuh: dense_groups_ld()); where that matrix is
// small next to L2 (at N = 50K, nq = 100: 21 MB of a 60 MB L2) this pair beats the fused search, whose few tiles per
// split leave its top-k epilogue on the critical path. Entry `rank` of row q is at q * query_stride + rank, its
// index is rank (MergeParams: one list of list_len = N entries, implicit indices).
//
//   1. Each thread reads its 16-byte chunks c = tid, tid + threads, ... of the row's group maxima (N / 16 floats,
//      not the N keys) and keeps the largest.
//   2. The k-th largest of the threads' maxima, B, bounds the answer: the k threads holding the largest maxima
//      supply k distinct entries >= B (a group maximum is an entry of its group), so nothing below B is in the top
//      k (fewer than k threads with an entry that is not NaN: B = -inf). Each warp sorts its 32 maxima across its
//      lanes; warp 0 takes the k largest heads of the warps' sorted lists.
//   3. Every entry >= B joins a queue in shared memory (about k of them for real data); its rank among the queue
//      (the family's order: larger key, or equal with a smaller index) is its place in the answer. Only the threads
//      whose maximum reaches B look at their groups again, and read the keys of the groups whose maximum does
//      (about k groups of 16 for real data: the earlier kernel read all N keys of the row, 11 us of the 46 at
//      50K/100 on the H200). When more than kSelectCap entries reach B (ties at the bound, e.g. duplicate corpus
//      rows), the k-th best of the queued ones is a higher bar (k queued entries are at least as good), and the
//      pass runs again with it.
//
// NaN keys never enter; a missing entry (fewer than k that are not NaN) is written as (-inf or +inf, -1). The row
// must be 16-byte aligned (query_stride a multiple of 4), and the group maxima follow the nq rows.
// Shared memory: merge_smem_bytes(kMergeSelect, k) in params.cuh.
#pragma once

#include "similarity/topk.cuh"  // MergeParams' helpers: write_merged, stash_query_norm2; better()

namespace tunelab {
namespace sim {

// Sorts one value per lane across the warp, descending (lane 0 the largest). Values must not be NaN.
__device__ __forceinline__ float warp_sort_desc(float x, int lane) {
#pragma unroll
  for (int size = 2; size <= 32; size <<= 1) {
#pragma unroll
    for (int stride = size >> 1; stride > 0; stride >>= 1) {
      const bool keep_max = ((lane & stride) == 0) == ((lane & size) == 0);
      const float o = shfl_xor_f(x, stride);
      x = keep_max ? fmaxf(x, o) : fminf(x, o);
    }
  }
  return x;
}

template <int DTYPE, int METRIC>
__global__ void __launch_bounds__(kSelectThreads) similarity_select(const __grid_constant__ MergeParams p) {
  constexpr int T = kSelectThreads, WARPS = T / 32, CAP = kSelectCap;
  static_assert(WARPS <= 32 && T % 32 == 0, "warps of 32 sorted maxima");
  extern __shared__ __align__(16) unsigned char tunelab_similarity_smem[];
  float* qkey = reinterpret_cast<float*>(tunelab_similarity_smem);  // [CAP] the queue
  int* qidx = reinterpret_cast<int*>(qkey + CAP);
  float* wmax = reinterpret_cast<float*>(qidx + CAP);               // [WARPS][32] each warp's sorted maxima
  int* count = reinterpret_cast<int*>(wmax + WARPS * 32);           // queue length
  float* bar_key = reinterpret_cast<float*>(count + 1);             // the bar of the next pass
  int* bar_idx = count + 2;
  float* qnorm = reinterpret_cast<float*>(count + 3);

  const int tid = static_cast<int>(threadIdx.x), lane = tid & 31, warp = tid >> 5;
  const int q = static_cast<int>(blockIdx.x);
  const int k = p.k, n = p.list_len;
  const float* row = p.cand_key + static_cast<long long>(q) * p.query_stride;
  const float4* row4 = reinterpret_cast<const float4*>(row);
  const int groups = static_cast<int>(dense_groups(n));
  const int gchunks = (groups + 3) / 4;  // 16-byte chunks of the group maxima (the last one's tail is not written)
  const float4* gmax4 = reinterpret_cast<const float4*>(p.cand_key + static_cast<long long>(p.nq) * p.query_stride +
                                                        static_cast<long long>(q) * dense_groups_ld(n));
  const float ninf = -f32_inf();
  // chunk c of the group maxima, its entries past the last group -inf
  auto group_chunk = [&](int c) {
    float4 v = gmax4[c];
    const int g0 = 4 * c;
    if (g0 + 3 >= groups) {
      if (g0 + 1 >= groups) v.y = ninf;
      if (g0 + 2 >= groups) v.z = ninf;
      if (g0 + 3 >= groups) v.w = ninf;
    }
    return v;
  };
  constexpr int G = 4;  // chunks in flight per thread

  // 1. each thread's largest group maximum (fmaxf drops NaN)
  if (tid == 0) sts(count, 0);
  float m = ninf;
  for (int c0 = tid; c0 < gchunks; c0 += G * T) {
    float4 v[G];
#pragma unroll
    for (int j = 0; j < G; ++j) v[j] = c0 + j * T < gchunks ? group_chunk(c0 + j * T) : float4{ninf, ninf, ninf, ninf};
#pragma unroll
    for (int j = 0; j < G; ++j) m = fmaxf(m, fmaxf(fmaxf(v[j].x, v[j].y), fmaxf(v[j].z, v[j].w)));
  }

  // 2. the bound: the k-th largest of the T maxima. Each warp sorts its maxima; warp 0 takes the k largest heads of
  // the warps' sorted lists (k rounds of a warp maximum). Two all-thread rankings of the WARPS * k candidates were
  // tried instead, and both took longer (a 512-thread block on an H100: 8.2 and 11.8 us against 9.8 for the kernel
  // that read whole rows).
  sts(wmax + warp * 32 + lane, warp_sort_desc(m, lane));  // m stays this thread's own maximum (step 3 reads it)
  __syncthreads();
  if (warp == 0) {
    int at = 0;  // this lane's next entry of warp `lane`'s sorted maxima
    float head = lane < WARPS ? lds(wmax + lane * 32) : ninf;
    float b = ninf;
    for (int r = 0; r < k; ++r) {
      float mx = head;
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, shfl_xor_f(mx, o));
      const unsigned holders = ballot(head == mx);  // never empty: mx is one lane's head (none is NaN)
      const int w = popc((holders & (0u - holders)) - 1u);  // the lowest lane holding it takes its next entry
      b = mx;
      if (lane == w) {
        ++at;
        head = at < 32 && lane < WARPS ? lds(wmax + lane * 32 + at) : ninf;
      }
    }
    if (lane == 0) {
      sts(bar_key, b);
      sts(bar_idx, 0x7fffffff);  // (b, INT_MAX): every entry whose key is >= b is at least as good
    }
  }
  stash_query_norm2<DTYPE, METRIC>(p, q, warp == WARPS - 1, lane, qnorm);
  __syncthreads();

  // 3. queue every entry at least as good as the bar; if too many did, raise the bar and queue again
  int m_count;
  for (;;) {
    const float bk = lds(bar_key);
    const int bi = lds(bar_idx);
    // x at least as good as (bk, bi): in the row, not worse, and not NaN (better() is false for every NaN comparison)
    auto passes = [&](float x, int e) { return e < n && x == x && !better(bk, bi, x, e); };
    auto offer4 = [&](const float4& v, int e) {  // chunk e / 4 of the keys: one atomic for its passing entries
      const bool p0 = passes(v.x, e), p1 = passes(v.y, e + 1), p2 = passes(v.z, e + 2), p3 = passes(v.w, e + 3);
      const int cnt = static_cast<int>(p0) + p1 + p2 + p3;
      if (cnt == 0) return;
      int slot = atomic_add_shared(count, cnt);
      if (p0 && slot < CAP) sts(qkey + slot, v.x), sts(qidx + slot, e);
      slot += p0;
      if (p1 && slot < CAP) sts(qkey + slot, v.y), sts(qidx + slot, e + 1);
      slot += p1;
      if (p2 && slot < CAP) sts(qkey + slot, v.z), sts(qidx + slot, e + 2);
      slot += p2;
      if (p3 && slot < CAP) sts(qkey + slot, v.w), sts(qidx + slot, e + 3);
    };
    auto offer_group = [&](int gi) {  // the keys of group gi: rows [16 gi, 16 gi + 16), those past n left out
      const int c0 = gi * (kDenseGroup / 4);
      float4 v[kDenseGroup / 4];
#pragma unroll
      for (int j = 0; j < kDenseGroup / 4; ++j)
        v[j] = 4 * (c0 + j) < n ? row4[c0 + j] : float4{ninf, ninf, ninf, ninf};
#pragma unroll
      for (int j = 0; j < kDenseGroup / 4; ++j) offer4(v[j], 4 * (c0 + j));
    };
    // a thread whose largest group maximum is below the bar has no entry that reaches it: only the threads whose
    // maximum does (about k of them for real data) look at their groups again (one with no group has -inf)
    for (int c = m >= bk ? tid : gchunks; c < gchunks; c += T) {
      const float4 v = group_chunk(c);
      if (v.x >= bk) offer_group(4 * c);
      if (v.y >= bk) offer_group(4 * c + 1);
      if (v.z >= bk) offer_group(4 * c + 2);
      if (v.w >= bk) offer_group(4 * c + 3);
    }
    __syncthreads();
    m_count = lds(count);
    if (m_count <= CAP) break;
    // More than CAP entries are at least as good as the bar: the k-th best of the CAP queued ones (k <= 32 < CAP)
    // is a higher bar (k queued entries are at least as good as it, and it is better than the old bar unless
    // fewer than k queued entries beat that, which CAP - 1 >= k of them do).
    for (int i = tid; i < CAP; i += T) {
      const float x = lds(qkey + i);
      const int xi = lds(qidx + i);
      int r = 0;
      for (int j = 0; j < CAP; ++j) r += better(lds(qkey + j), lds(qidx + j), x, xi) ? 1 : 0;
      if (r == k - 1) {  // ranks are distinct (the order is total): one thread writes
        sts(bar_key, x);
        sts(bar_idx, xi);
      }
    }
    __syncthreads();
    if (tid == 0) sts(count, 0);
    __syncthreads();
  }

  // 4. each queued entry's rank is its place in the answer; the places past the queue are missing entries
  float qn2 = 0.f;
  if constexpr (METRIC != kIP) qn2 = lds(qnorm);
  for (int i = tid; i < m_count; i += T) {
    const float x = lds(qkey + i);
    const int xi = lds(qidx + i);
    int r = 0;
    for (int j = 0; j < m_count; ++j) r += better(lds(qkey + j), lds(qidx + j), x, xi) ? 1 : 0;
    if (r < k) write_merged<METRIC>(p, q, r, true, x, xi, qn2);
  }
  for (int r = m_count + tid; r < k; r += T) write_merged<METRIC>(p, q, r, false, 0.f, 0, qn2);
}

}  // namespace sim
}  // namespace tunelab
