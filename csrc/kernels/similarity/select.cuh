// The top-k of each row of a dense key matrix (merge kind kMergeSelect): one block of kSelectThreads threads per
// query. The search with MERGE=5 writes every key of the nq x N matrix (no running top-k); where that matrix is
// small next to L2 (at N = 50K, nq = 100: 20 MB of a 60 MB L2) this pair beats the fused search, whose few tiles per
// split leave its top-k epilogue on the critical path. Entry `rank` of row q is at q * query_stride + rank, its
// index is rank (MergeParams: one list of list_len = N entries, implicit indices).
//
//   1. The row's first kSelectWindow entries are copied to shared memory (16-byte cp.async, where the row is
//      16-byte aligned), each thread owning the 4-entry chunks c = tid, tid + threads, ...; chunks past them are
//      read from global memory in both passes (16-byte loads; four in flight per thread in the first), and so are
//      the last n % 4 entries and every entry of an unaligned row (one at a time: the op's rows are always
//      aligned). Each thread keeps the largest of its entries.
//   2. A bar B that k distinct entries reach bounds the answer: nothing below B is in the top k. Each warp sorts
//      its 32 threads' maxima across its lanes; B is the larger of the k-th largest of the 32 warps' maxima (k
//      warps supply an entry >= it each) and the largest of the warps' k-th largest thread maxima (k threads of
//      one warp do). For real data it is about the k-th largest of all T maxima; k rounds of warp 0 that found
//      that exactly (a 32-way merge of the sorted lists, one head a round) kept the other 31 warps waiting for
//      17% of ncu's warp samples at 50K/100 on an H100 (results/ncu_similarity_select_bound_h100.txt). Fewer than
//      k entries that are not NaN: B = -inf.
//   3. Every entry >= B joins a queue in shared memory (about k of them for real data); its rank among the queue
//      (the family's order: larger key, or equal with a smaller index) is its place in the answer. Only the
//      entries of the threads whose maximum reaches B are looked at again, each such thread's by its whole warp.
//      (At 50K/100 on the H200 every thread's second pass took 28% of ncu's warp samples,
//      results/ncu_similarity_select_full_h200.txt, with 14% more for the other warps waiting for warp 0's k
//      rounds of step 2 and 11% for the window's copy; after that the owners alone walking their entries kept
//      the other warps waiting for 19% on an H100, ncu_similarity_select_pass_h100.txt.) When more than
//      kSelectCap entries reach B (ties at the bound, e.g. duplicate corpus rows), the k-th best of the queued
//      ones is a higher bar (k queued entries are at least as good), and the pass runs again with it.
//
// Measured and reverted (ac549d2): the search also writing the maximum of every 16-key block after a row's keys, and
// steps 1 and 2 taking those maxima as the row's entries, step 3 reading only the keys of the blocks that reach the
// bar (12.5 KB a query at 50K instead of 200 KB). On an H100 at 50K / 100 the pair took 63.3 against 53.6 us and the
// select alone 15.8 against 10.8 (8 and 32 queries 8% slower, one query equal; results/similarity_select_bound_h100_
// block_maxima.json); the search alone took 49.5 against the filtered search's 46.6 in that run (its usual 45.2:
// similarity_filtered_h100_block_maxima.json), with the maxima's shuffles and stores in every tile's epilogue. Why the
// select got slower with less to read was not found (no ncu run): the owners' block reads are global loads, one warp
// lane each, where the window's were shared-memory ones.
//
// Measured and reverted (6b5387c): the window by bulk copies (cp.async.bulk, 13 pieces of 16 KiB on mbarriers, thread 0
// issuing them) instead of every thread's cp.async. On an H100 at 50K the select alone took 11.1 against 11.1 us at
// nq = 100 and 10.3 against 9.8 at nq = 1 (results/similarity_select_bound_h100_bulk.json); the diagnosis build's
// stamps (benchmarks/similarity_select_trace.py, results/similarity_select_trace_h100.json) put step 1 at 3.1 against
// 2.3 us for one query, 4.2 against 3.8 for 100: with 100 blocks reading their 20 MB together (about 4-5 TB/s
// from L2) the copy's form does not bound it, and for one block the bulk copies were slower.
//
// The candidate rows of a MERGE=6 search have their own select (select_filtered.cuh, merge kind kMergeFilterSelect);
// this kernel read them too until that one replaced it (its history is there).
//
// NaN keys never enter; a missing entry (fewer than k that are not NaN) is written as (-inf or +inf, -1).
// Shared memory: merge_smem_bytes(kMergeSelect, k) in params.cuh.
#pragma once

#include "similarity/topk.cuh"  // MergeParams' helpers: write_merged, stash_query_norm2; better()

namespace tunelab {
namespace sim {

// The select's diagnosis build (TUNELAB_SIM_SELECT_TRACE, benchmarks/similarity_select_trace.py): thread 0 of each
// block stamps %globaltimer at kSelectTraceStamps points (entry, the prior grid's end, steps 1 to 4) and writes them
// over the first entries of its row of the key matrix when the block is done (the next search rewrites the row).
constexpr int kSelectTraceStamps = 6;  // (topk.cuh select_clock())

template <int DTYPE, int METRIC>
__global__ void __launch_bounds__(kSelectThreads) similarity_select(const __grid_constant__ MergeParams p) {
  constexpr int T = kSelectThreads, WARPS = T / 32, CAP = kSelectCap;
  static_assert(WARPS <= 32, "warp 0 takes one warp's maxima per lane");
  extern __shared__ __align__(1024) unsigned char tunelab_similarity_smem[];
  float* win = reinterpret_cast<float*>(tunelab_similarity_smem);  // [kSelectWindow] the row's first entries
  float* qkey = win + kSelectWindow;                                // [CAP] the queue
  int* qidx = reinterpret_cast<int*>(qkey + CAP);
  float* wmax = reinterpret_cast<float*>(qidx + CAP);               // [2][32] the warps' largest, k-th maxima
  int* count = reinterpret_cast<int*>(wmax + 2 * 32);               // queue length
  float* bar_key = reinterpret_cast<float*>(count + 1);             // the bar of the next pass
  int* bar_idx = count + 2;
  float* qnorm = reinterpret_cast<float*>(count + 3);

  unsigned long long stamp[kSelectTraceStamps];  // (trace build)
  stamp[0] = select_clock();
  pdl_wait_prior_grid();  // a programmatic launch after the search: its key matrix is complete from here on
  stamp[1] = select_clock();
  const int tid = static_cast<int>(threadIdx.x), lane = tid & 31, warp = tid >> 5;
  const int q = static_cast<int>(blockIdx.x);
  const int n = p.list_len;  // the row's entries; entry e's index is e
  const int k = p.k;
  const float* row = p.cand_key + static_cast<long long>(q) * p.query_stride;
  const bool aligned = (reinterpret_cast<unsigned long long>(row) & 15) == 0;
  const int all_chunks = aligned ? n / 4 : 0;  // 16-byte chunks of the row
  const int chunks = all_chunks < kSelectWindow / 4 ? all_chunks : kSelectWindow / 4;  // those in the window
  const int rest = 4 * all_chunks;  // entries from here on are read one at a time (by thread (e - rest) % T)
  const float4* row4 = reinterpret_cast<const float4*>(row);
  constexpr int G = 4;  // chunks past the window: loads in flight per thread

  // 1. copy the window, and each thread's maximum (fmaxf drops NaN)
  if (tid == 0) sts(count, 0);
  for (int c = tid; c < chunks; c += T) cp_async<16>(smem_u32(win + 4 * c), row + 4 * c, true);
  cp_async_commit();
  float m = -f32_inf();
  for (int c0 = chunks + tid; c0 < all_chunks; c0 += G * T) {
    float4 v[G];
#pragma unroll
    for (int g = 0; g < G; ++g) v[g] = c0 + g * T < all_chunks ? row4[c0 + g * T] : float4{m, m, m, m};
#pragma unroll
    for (int g = 0; g < G; ++g) m = fmaxf(m, fmaxf(fmaxf(v[g].x, v[g].y), fmaxf(v[g].z, v[g].w)));
  }
  for (int e = rest + tid; e < n; e += T) m = fmaxf(m, row[e]);
  cp_async_wait<0>();  // this thread's own chunks have landed (no other thread reads them)
  for (int c = tid; c < chunks; c += T) {
    const float4 v = lds4(win + 4 * c);
    m = fmaxf(m, fmaxf(fmaxf(v.x, v.y), fmaxf(v.z, v.w)));
  }

  stamp[2] = select_clock();

  // 2. the bound: the larger of the k-th largest of the warps' maxima and the largest of the warps' k-th largest
  // thread maxima (m stays this thread's own maximum: step 3 reads it)
  const float sorted = warp_sort_desc(m, lane);  // lane 0 the warp's largest maximum, lane k - 1 its k-th
  if (lane == 0) sts(wmax + warp, sorted);
  if (lane == k - 1) sts(wmax + 32 + warp, sorted);
  __syncthreads();
  if (warp == 0) {
    const float head = lane < WARPS ? lds(wmax + lane) : -f32_inf();
    float b = lane < WARPS && k <= 32 ? lds(wmax + 32 + lane) : -f32_inf();
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) b = fmaxf(b, shfl_xor_f(b, o));
    const float kth_head = k <= 32 ? warp_kth_largest(head, k, lane) : -f32_inf();
    if (lane == 0) {
      sts(bar_key, fmaxf(b, kth_head));
      sts(bar_idx, 0x7fffffff);  // (bar, INT_MAX): every entry whose key is >= bar is at least as good
    }
  }
  stash_query_norm2<DTYPE, METRIC>(p, q, warp == WARPS - 1, lane, qnorm);
  __syncthreads();
  stamp[3] = select_clock();
  // 3. queue every entry at least as good as the bar; if too many did, raise the bar and queue again
  int m_count;
  for (;;) {
    const float bk = lds(bar_key);
    const int bi = lds(bar_idx);
    // x (entry e) at least as good as (bk, bi): not worse, and not NaN (better() is false for every NaN
    // comparison); the index is read only for a key equal to the bar
    auto passes = [&](float x, int e) { return x == x && !(bk > x || (bk == x && bi < e)); };
    auto offer4 = [&](const float4& v, int e) {  // chunk e / 4: one atomic for its passing entries
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
    auto offer = [&](float x, int e) {
      if (passes(x, e)) {
        const int slot = atomic_add_shared(count, 1);
        if (slot < CAP) sts(qkey + slot, x), sts(qidx + slot, e);
      }
    };
    // a thread whose largest entry is below the bar has none that reaches it: only the entries of the threads whose
    // maximum does (k of them for real data; a thread with only NaN entries has maximum -inf) are looked at again,
    // each such thread's by its whole warp (lane j takes its j-th, j + 32-th, ... chunk: one thread alone walked
    // its 12 chunks at 50K in a dependent chain that kept the block's other warps waiting for 19% of ncu's warp
    // samples, results/ncu_similarity_select_pass_h100.txt)
    const bool mine = m >= bk;
    for (unsigned owners = ballot(mine); owners != 0u; owners &= owners - 1u) {
      const int owner = warp * 32 + lowest_set_bit(owners);
      // the owner's chunks: in the window owner + j * T (j < in_win), past it chunks + owner + (j - in_win) * T
      const int in_win = chunks > owner ? (chunks - owner + T - 1) / T : 0;
      const int past = all_chunks > chunks + owner ? (all_chunks - chunks - owner + T - 1) / T : 0;
      for (int j = lane; j < in_win + past; j += 32) {
        const int c = j < in_win ? owner + j * T : chunks + owner + (j - in_win) * T;
        offer4(j < in_win ? lds4(win + 4 * c) : row4[c], 4 * c);
      }
      for (int e = rest + owner + lane * T; e < n; e += 32 * T) offer(row[e], e);
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

  stamp[4] = select_clock();
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
#ifdef TUNELAB_SIM_SELECT_TRACE
  __syncthreads();  // every thread's step 4 (and step 3's reads of the row) done
  stamp[5] = select_clock();
  if (tid == 0 && p.query_stride >= 2 * kSelectTraceStamps)  // (rows of fewer entries keep theirs)
    for (int i = 0; i < kSelectTraceStamps; ++i)
      reinterpret_cast<unsigned long long*>(const_cast<float*>(row))[i] = stamp[i];
#else
  (void)stamp;
#endif
}

}  // namespace sim
}  // namespace tunelab
