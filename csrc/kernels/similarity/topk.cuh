// Top-k similarity search with the top-k fused into the GEMM: the nq x N score matrix is never written.
//
//   similarity_topk<TopkTraits<...>>  grid (query tiles, splits). A block owns BLOCK_Q queries and a
//       contiguous range of corpus tiles (BLOCK_N rows each). The corpus tile is the MMA's A operand (M = corpus
//       rows, so one query costs an n8 column, not an m16 row), the queries the B operand; both stream through a
//       STAGES-deep cp.async ring over the feature dimension in BLOCK_K slices, so the block reads every corpus
//       byte exactly once and keeps all its queries on chip without holding all of d. After the last slice of
//       a tile the fp32 keys go to a shared score tile (EPI_ROWS rows at a time), and each warp updates the
//       running top-k of the query columns it owns (see consume()). At the end every split writes k candidates
//       per query.
//   similarity_merge<DTYPE, METRIC, WARPS>  one block per query: merges the candidate lists of all splits (and,
//       when streaming, the running list of earlier chunks) into the final sorted top-k.
//
// Order and ties (everywhere, including the merge): a candidate is better when its key is larger, or equal
// with a smaller corpus index. The order is total (indices are distinct), so results are deterministic and
// independent of the number of splits, of chunking and of warp scheduling. NaN keys never enter a list; when
// fewer than k candidates exist the missing entries have index -1.
//
// Running top-k of one query (consume()): a sorted list of up to k (key, index) pairs in shared memory,
// double-buffered. A column of new keys is filtered against the list's k-th entry (one compare per key: the
// common case in the steady state, where a key enters with probability ~k / seen). While the list is not yet
// full, a cheaper bound than -inf is used: the k-th largest of the 32 per-lane maxima; the k lanes holding
// those maxima supply k distinct candidates >= the bound, so nothing below it can be in the top k, and the
// first tile inserts ~k..2k candidates instead of EPI_ROWS. Passing keys are compacted (ballot) into a
// per-warp scratch list and merged with the sorted list:
//   MERGE 0 (rank):    each element's output position is its rank in the union: list element i: i + #scratch
//                      better; scratch element: #scratch better + #list better (binary search). O((len+m) m / 32).
//   MERGE 1 (bitonic): sort the scratch list with a warp bitonic network, then both ranks by binary search.
//                      O(m log^2 m / 32): faster when many candidates pass (large k).
//   MERGE 2 (hybrid):  rank when m <= 32, else bitonic.
//
// Thread lists (MERGE 3: k <= 16, MERGE 4: k <= 32): the warp-collective merge above costs thousands of cycles per
// (query, tile) that has a passing key, and one warp serves BLOCK_Q / warps queries in turn. Instead every thread
// owns one query column and 1 / PARTS of the score tile's rows (PARTS = thread_list_parts(): threads / BLOCK_Q,
// a power of two up to 4) and keeps its own sorted top-k in registers (ThreadTopk, thread_topk.cuh): it scans
// its rows with float4 reads and inserts the few keys that pass, with no warp synchronization. A key is offered
// only when it is at least the column's bar: the largest k-th key among the column's parts (each part's list
// holds k real candidates of that column, so nothing below that bar is in the column's top k). At the end of a
// split parts 1.. hand their lists to part 0 through shared memory, which inserts them and writes the split's
// candidate list.
//
// Candidate queues (thread lists): the store-and-scan above costs a score-tile store, a barrier and a scan of the
// column's rows whenever any key of a column passes, which after the first tiles is every tile somewhere in the
// block (at nq = 100, ~2k / t keys per column pass in tile t) - on the H200 it took 1.8 ms of the 5.65 ms at
// N = 10M, nq = 100 and 16 of the 46 ms at nq = 1024, more than ping-pong hides. So the pre-check itself hands
// over the keys that pass: each thread compares its accumulators with their column's bar and appends a passing
// (key, index) to the column's queue in the score tile (an atomic slot count; kQueueCap entries), and after one
// barrier part 0 of the column inserts its queue into its list. Only when a queue overflows (more than kQueueCap
// passing keys: all-tie input, or rarely a loose bar, see kQueueCap) does the tile take the store-and-scan path,
// over every column. Either way the same keys reach the lists and the exact rule decides, so the result does not
// depend on the path.
//
// Bound pass (thread lists): on a split's first tile no list is full, so every key would pass a bar of -inf and
// the store-and-scan path would insert most rows one by one (on the H200 at N = 50K, nq = 100, where a split has
// 3 tiles, the epilogue took 38 of the search's 70 us). Instead the tile first finds a bound per column, the k-th
// largest of the maxima its accumulator holders offer (bound_pass()), which ~k keys then pass, through the queues.
#pragma once

#include "common/cluster.cuh"
#include "common/mbarrier.cuh"
#include "common/pdl.cuh"
#include "common/setmaxnreg.cuh"
#include "common/tma.cuh"
#include "common/wgmma.cuh"
#include "similarity/mma_tile.cuh"
#include "similarity/thread_topk.cuh"

namespace tunelab {
namespace sim {

// Bitonic sort across lanes, descending (lane 0 the largest), of N values per lane at once (x[i] of every lane: N
// independent sorts, whose shuffle chains hide each other's latency). Values must not be NaN (fmaxf/fminf would
// drop them).
template <int N>
__device__ __forceinline__ void warp_sort_desc_n(float (&x)[N], int lane) {
#pragma unroll
  for (int size = 2; size <= 32; size <<= 1) {
#pragma unroll
    for (int stride = size >> 1; stride > 0; stride >>= 1) {
      // in a descending block the lower lane of each pair keeps the max; blocks alternate direction until
      // the final merge (size 32), which is descending for every lane
      const bool keep_max = ((lane & stride) == 0) == ((lane & size) == 0);
#pragma unroll
      for (int i = 0; i < N; ++i) {
        const float o = shfl_xor_f(x[i], stride);
        x[i] = keep_max ? fmaxf(x[i], o) : fminf(x[i], o);
      }
    }
  }
}
__device__ __forceinline__ float warp_sort_desc(float x, int lane) {
  float v[1] = {x};
  warp_sort_desc_n<1>(v, lane);
  return v[0];
}
// The k-th largest (1 <= k <= 32) of one value per lane, for N values per lane at once; every lane gets the results
// in x. Values must not be NaN.
template <int N>
__device__ __forceinline__ void warp_kth_largest_n(float (&x)[N], int k, int lane) {
  warp_sort_desc_n<N>(x, lane);
#pragma unroll
  for (int i = 0; i < N; ++i) x[i] = shfl_f(x[i], k - 1);
}
// Sorts N (a power of two) values held by one thread, descending: a bitonic network in registers. Values must not
// be NaN.
template <int N>
__device__ __forceinline__ void lane_sort_desc(float (&v)[N]) {
#pragma unroll
  for (int size = 2; size <= N; size <<= 1) {
#pragma unroll
    for (int stride = size >> 1; stride > 0; stride >>= 1) {
#pragma unroll
      for (int i = 0; i < N; ++i) {
        const int j = i ^ stride;
        if (j > i) {
          const bool desc = (i & size) == 0;  // blocks alternate direction; the final merge (size N) descends
          const float a = v[i], b = v[j];
          v[i] = desc ? fmaxf(a, b) : fminf(a, b);
          v[j] = desc ? fminf(a, b) : fmaxf(a, b);
        }
      }
    }
  }
}
// The pre-check's word of pass flags: 32 bits, or 64 where a chunk has more accumulators (FlagWord<true>).
template <bool Wide>
struct FlagWord {
  using type = unsigned;
};
template <>
struct FlagWord<true> {
  using type = unsigned long long;
};
// Sorts a bitonic sequence of N (a power of two) values held by one thread, descending. Values must not be NaN.
template <int N>
__device__ __forceinline__ void lane_bitonic_clean_desc(float (&v)[N]) {
#pragma unroll
  for (int stride = N >> 1; stride > 0; stride >>= 1) {
#pragma unroll
    for (int i = 0; i < N; ++i) {
      if ((i & stride) == 0) {
        const float a = v[i], b = v[i + stride];
        v[i] = fmaxf(a, b);
        v[i + stride] = fminf(a, b);
      }
    }
  }
}
// The k-th largest (1 <= k <= 32) of the 32 values at m (16-byte aligned, none NaN), selected by one thread in
// registers: the 16 largest by sorting both halves and cleaning the larger of a[i] and b[15 - i] (a bitonic
// sequence holding the 16 largest), ~400 min/max operations against ~670 for offering the second half one by one
// to the sorted first; then the smallest of the first k (selecting v[k - 1] by index made ptxas put v in local
// memory, 16 LDL per thread). kUpTo32: k may pass 16, and then the same selection over the negated values gives
// the (33 - k)-th smallest, which is the k-th largest.
// lane_kth_largest_of_32's selection over the 32 values in v (the first 16) and w (the rest), already multiplied by
// s (-1: k > 16, selecting the (33 - k)-th smallest); j is k or 33 - k.
__device__ __forceinline__ float lane_kth_largest_of_32_core(float (&v)[16], float (&w)[16], float s, int j) {
  lane_sort_desc<16>(v);
  lane_sort_desc<16>(w);
#pragma unroll
  for (int i = 0; i < 16; ++i) v[i] = fmaxf(v[i], w[15 - i]);
  lane_bitonic_clean_desc<16>(v);
  float b = v[0];
#pragma unroll
  for (int i = 1; i < 16; ++i) b = i < j ? fminf(b, v[i]) : b;
  return s * b;
}
template <bool kUpTo32>
__device__ __forceinline__ float lane_kth_largest_of_32(const float* m, int k) {
  const bool low = kUpTo32 && k > 16;
  const float s = low ? -1.f : 1.f;
  float v[16], w[16];
#pragma unroll
  for (int i = 0; i < 16; i += 4) {
    const float4 x = lds4(m + i), y = lds4(m + 16 + i);
    v[i] = s * x.x;
    v[i + 1] = s * x.y;
    v[i + 2] = s * x.z;
    v[i + 3] = s * x.w;
    w[i] = s * y.x;
    w[i + 1] = s * y.y;
    w[i + 2] = s * y.z;
    w[i + 3] = s * y.w;
  }
  return lane_kth_largest_of_32_core(v, w, s, low ? 33 - k : k);
}
__device__ __forceinline__ float warp_kth_largest(float x, int k, int lane) {
  float v[1] = {x};
  warp_kth_largest_n<1>(v, k, lane);
  return v[0];
}

// Number of entries of the sorted list (best first) that are better than (ek, ei): a prefix length.
__device__ __forceinline__ int count_better_sorted(const float* Lk, const int* Li, int len, float ek, int ei) {
  int lo = 0, hi = len;
  while (lo < hi) {
    const int mid = (lo + hi) >> 1;
    if (better(lds(Lk + mid), lds(Li + mid), ek, ei)) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

// Union of the sorted list L (len) and the unsorted scratch list B (m) -> the best min(k, len + m) of them,
// sorted, into O. Ranks in the union are distinct (total order), so every output slot is written once.
__device__ __forceinline__ void merge_rank(const float* Lk, const int* Li, int len, const float* Bk, const int* Bi,
                                           int m, float* Ok, int* Oi, int k, int lane) {
  for (int i = lane; i < len; i += 32) {
    const float ek = lds(Lk + i);
    const int ei = lds(Li + i);
    int r = i;
    for (int j = 0; j < m; ++j) r += better(lds(Bk + j), lds(Bi + j), ek, ei) ? 1 : 0;
    if (r < k) {
      sts(Ok + r, ek);
      sts(Oi + r, ei);
    }
  }
  for (int j = lane; j < m; j += 32) {
    const float ek = lds(Bk + j);
    const int ei = lds(Bi + j);
    int r = count_better_sorted(Lk, Li, len, ek, ei);
    for (int j2 = 0; j2 < m; ++j2) r += better(lds(Bk + j2), lds(Bi + j2), ek, ei) ? 1 : 0;
    if (r < k) {
      sts(Ok + r, ek);
      sts(Oi + r, ei);
    }
  }
}

// Sorts B[0..m) best first with a bitonic network over P = next power of two >= m entries (P <= CAP, the
// scratch capacity); entries m..P-1 are padded with the worst possible (-inf, INT_MAX), which sort last.
template <int CAP>
__device__ __forceinline__ void sort_scratch(float* Bk, int* Bi, int m, int lane) {
  int P = 1;
  while (P < m) P <<= 1;
  for (int i = m + lane; i < P; i += 32) {
    sts(Bk + i, -f32_inf());
    sts(Bi + i, 0x7fffffff);
  }
  syncwarp();
  for (int size = 2; size <= P; size <<= 1) {
    for (int stride = size >> 1; stride > 0; stride >>= 1) {
      for (int p = lane; p < (P >> 1); p += 32) {
        const int i = ((p & ~(stride - 1)) << 1) | (p & (stride - 1));
        const int j = i + stride;
        const bool desc = (i & size) == 0;  // at size == P every block is descending (best first)
        const float ki = lds(Bk + i), kj = lds(Bk + j);
        const int ii = lds(Bi + i), ij = lds(Bi + j);
        const bool swap = desc ? better(kj, ij, ki, ii) : better(ki, ii, kj, ij);
        if (swap) {
          sts(Bk + i, kj);
          sts(Bi + i, ij);
          sts(Bk + j, ki);
          sts(Bi + j, ii);
        }
      }
      syncwarp();
    }
  }
}

template <int CAP>
__device__ __forceinline__ void merge_bitonic(const float* Lk, const int* Li, int len, float* Bk, int* Bi, int m,
                                              float* Ok, int* Oi, int k, int lane) {
  sort_scratch<CAP>(Bk, Bi, m, lane);
  for (int i = lane; i < len; i += 32) {
    const float ek = lds(Lk + i);
    const int ei = lds(Li + i);
    const int r = i + count_better_sorted(Bk, Bi, m, ek, ei);
    if (r < k) {
      sts(Ok + r, ek);
      sts(Oi + r, ei);
    }
  }
  for (int j = lane; j < m; j += 32) {
    const float ek = lds(Bk + j);
    const int ei = lds(Bi + j);
    const int r = j + count_better_sorted(Lk, Li, len, ek, ei);
    if (r < k) {
      sts(Ok + r, ek);
      sts(Oi + r, ei);
    }
  }
}

// The running top-k of one query: two list buffers (k entries each) and meta = {len, sel, thr_key, thr_idx}:
// the list in use is buffer `sel`, holding `len` entries, best first; (thr_key, thr_idx) is its k-th entry, or
// (-inf, INT_MAX) while it holds fewer than k (every non-NaN candidate beats that). Owned (written) by exactly one
// warp; the threshold is read by every thread of the search block for its pre-check.
struct QueryList {
  float* key0;
  int* idx0;
  float* key1;
  int* idx1;
  int* meta;
};

// Offer R * 32 candidates (v[r], id[r] of every lane) to the running top-k of one query. Warp-collective.
// Scratch sk/si holds at least 32 * R entries.
template <int R, int MERGE>
__device__ __forceinline__ void consume(const QueryList& ql, const float (&v)[R], const int (&id)[R], int k, float* sk,
                                        int* si, int lane) {
  const int len = lds(ql.meta);
  const int sel = lds(ql.meta + 1);
  const float* Lk = sel ? ql.key1 : ql.key0;
  const int* Li = sel ? ql.idx1 : ql.idx0;
  float* Ok = sel ? ql.key0 : ql.key1;
  int* Oi = sel ? ql.idx0 : ql.idx1;
  bool pass[R];
  if (len >= k) {
    const float tk = lds(Lk + (k - 1));
    const int ti = lds(Li + (k - 1));
#pragma unroll
    for (int r = 0; r < R; ++r) pass[r] = better(v[r], id[r], tk, ti);
  } else {
    float tau = -f32_inf();
    if (k <= 32) {
      float mx = -f32_inf();
      bool any = false;
#pragma unroll
      for (int r = 0; r < R; ++r) {
        if (v[r] == v[r]) {  // not NaN
          mx = fmaxf(mx, v[r]);
          any = true;
        }
      }
      if (popc(ballot(any)) >= k) tau = warp_kth_largest(mx, k, lane);
    }
#pragma unroll
    for (int r = 0; r < R; ++r) pass[r] = v[r] >= tau;  // NaN fails
  }
  unsigned bal[R];
  int total = 0;
#pragma unroll
  for (int r = 0; r < R; ++r) {
    bal[r] = ballot(pass[r]);
    total += popc(bal[r]);
  }
  if (total == 0) return;
  int base = 0;
#pragma unroll
  for (int r = 0; r < R; ++r) {
    if (pass[r]) {
      const int pos = base + popc(bal[r] & lanemask_lt(lane));
      sts(sk + pos, v[r]);
      sts(si + pos, id[r]);
    }
    base += popc(bal[r]);
  }
  syncwarp();
  if (MERGE == 0 || (MERGE == 2 && total <= 32)) {
    merge_rank(Lk, Li, len, sk, si, total, Ok, Oi, k, lane);
  } else {
    merge_bitonic<32 * R>(Lk, Li, len, sk, si, total, Ok, Oi, k, lane);
  }
  syncwarp();  // the merged list is complete: lane 0 reads its k-th entry
  if (lane == 0) {
    const int nl = len + total < k ? len + total : k;
    sts(ql.meta, nl);
    sts(ql.meta + 1, sel ^ 1);
    sts(reinterpret_cast<float*>(ql.meta + 2), nl >= k ? lds(Ok + (k - 1)) : -f32_inf());
    sts(ql.meta + 3, nl >= k ? lds(Oi + (k - 1)) : 0x7fffffff);
  }
  syncwarp();
}

// MERGE=6's global bars (TopkBlock::global_bar()): a float as an unsigned word in the same order, so that an
// unsigned atomic max raises a bar; 0 is below every key's word and means no bar (ordered_float(0) = -inf).
__device__ __forceinline__ unsigned ordered_bits(float x) {
  const unsigned u = __float_as_uint(x);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
__device__ __forceinline__ float ordered_float(unsigned u) {
  return u == 0u ? -f32_inf() : __uint_as_float((u & 0x80000000u) ? (u & 0x7fffffffu) : ~u);
}

// ------------------------------------------------------------------------------------------ search kernel

// MMA_ selects the main loop's tensor-core path:
//   0 (mma.sync): each warp owns a (BLOCK_N / WARPS_N) x (BLOCK_Q / WARPS_Q) tile, fragments via ldmatrix.
//   1 (wgmma, sm_90a): warpgroups of 4 warps; warpgroup w owns corpus rows [w * BN / WG, (w + 1) * BN / WG) in
//     m64 blocks and every query column (WARPS_Q = 1, BLOCK_N = 64 * WG * MT); both operands go from shared
//     memory to the tensor cores (no ldmatrix, no fragments in registers), and the MMA of one slice overlaps the
//     issue of the next: one wgmma group stays in flight, so a stage is refilled two slices after it was read
//     (prefetch distance STAGES - 2, STAGES >= 3). 16-bit inputs with 128-byte row slices (BLOCK_K = 64).
//     The accumulators have mma.sync's fragment layout: warp q of a warpgroup holds rows 16q + g (+8) of each
//     m64 block, so the epilogue is shared; only the row of (mt, h) differs (row_of()).
//   2 (wgmma with a TMA producer, sm_90a): the tiles and MMAs of 1, but the slices are fetched by one extra
//     warpgroup (the last), whose first lane issues a TMA copy per operand and slice (tensor maps in SearchParams)
//     into a STAGES-deep ring guarded by mbarriers: full[s] completes when both copies of stage s have landed,
//     empty[s] when every MMA warp has finished with it (each warp arrives after its wgmma group is done). The MMA
//     warps never wait for each other in the main loop (no block barrier per slice, as 0 and 1 need for their
//     cp.async ring), and the producer keeps up to STAGES slices in flight, also while the MMA warps run the top-k
//     epilogue, which synchronizes only them (named barrier 1). With two MMA warpgroups the producer's registers
//     go to them (setmaxnreg: 24 and 240 per thread instead of 168 each), room for 256-row tiles' 112
//     accumulators next to thread lists.
//   3 (ping-pong, sm_90a): the producer and ring of 2, but each of the two MMA warpgroups owns whole tiles (all
//     BLOCK_N rows, m64 blocks 0..MT-1), warpgroup w the split's tiles w, w + 2, ... The ring holds the slices in
//     tile order, and an order barrier per warpgroup makes them take turns on the main loop (see run(): it also
//     keeps the ring's parity waits exact): while one multiplies its tile, the other runs the top-k epilogue of its
//     previous one, which no longer stalls the main loop. Each warpgroup has its own score tile (with its candidate
//     queues), row norms, thread-list parts and named barrier (1 + w); a stage is released by the 4 warps of the
//     warpgroup that read it. The column bars take the maximum over every part of both warpgroups
//     (a part's k-th key bounds the column wherever it was found; a bar read while the other warpgroup raises it
//     is an older, lower, still valid bar). At the end the parts of both meet as in write_thread_lists().
//     Thread lists (MERGE 3, 4), or no running top-k (MERGE 5, 6): shared lists would need one per warpgroup and
//     query.
//
// CLUSTER_ (MMA 2, 3): blocks per thread-block cluster along the splits (params.cuh topk_cluster_ok()). The blocks
// of a cluster share a query tile and each producer TMA-multicasts its 1 / CLUSTER of every query slice to all of
// them (its corpus slices stay its own), so L2 serves a query byte once per cluster instead of once per block.
// (Built to test whether those re-reads bound the MMA=3 loop at nq = 100, where ncu reads 80-84% L2 throughput
// against 62-65% DRAM: on the H200 they halve the query reads and leave the time and both figures as they were,
// so the defaults keep CLUSTER = 1; SIMILARITY.md. What bounded the loop was the top-k epilogue: see the candidate
// queues.) A stage of every block is then written by every producer of the
// cluster, so it is released to all of them: empty[s] counts the MMA warps of the whole cluster (each arrives on
// every block's empty[s]), full[s] the block's own producer, whose expected bytes are the stage's (corpus slice
// and every query part). The blocks of a cluster walk the same number of tiles (tiles_per_split; those past
// num_tiles load no corpus and score only masked rows) so that their rings advance together; the producer waits
// for the last releases before its block may exit (no remote arrival can reach a block that has left), and a
// cluster barrier after the mbarrier initialization precedes every remote access.
//
// PREFETCH_ (MMA 2, 3): L2 prefetch distance in tiles (0: none). A slice reads 128 bytes of each of BLOCK_N rows
// d * element bytes apart, and the slices of a tile follow each other at the pace of the MMAs; with PREFETCH the
// producer asks L2 for all slices of a later tile together (cp.async.bulk.prefetch.tensor), so DRAM serves whole
// rows, and the ring's copies then hit L2. (It tested whether the 128-byte pieces hold DRAM at 63% at nq = 100:
// on the H200 it is 8% slower with the next tile and 23% with the one after, so the defaults keep PREFETCH = 0.)
template <int DTYPE_, int METRIC_, int BLOCK_N_, int BLOCK_Q_, int BLOCK_K_, int WARPS_N_, int WARPS_Q_, int STAGES_,
          int VEC_, int MERGE_, int EPI_ROWS_ = 128, int MIN_BLOCKS_ = 1, int MMA_ = 0, int CLUSTER_ = 1,
          int PREFETCH_ = 0>
struct TopkTraits {
  static constexpr int kDtype = DTYPE_;
  static constexpr int kMetric = METRIC_;
  static constexpr int kBlockN = BLOCK_N_;
  static constexpr int kBlockQ = BLOCK_Q_;
  static constexpr int kBlockK = BLOCK_K_;
  static constexpr int kWarpsN = WARPS_N_;
  static constexpr int kWarpsQ = WARPS_Q_;
  static constexpr int kStages = STAGES_;
  static constexpr int kVec = VEC_;
  static constexpr int kMerge = MERGE_;
  static constexpr int kMinBlocks = MIN_BLOCKS_;  // __launch_bounds__ minimum: 2 caps registers for 2 blocks/SM
  static constexpr int kMma = MMA_;
  static constexpr bool kWgmma = topk_uses_wgmma(MMA_);
  static constexpr bool kFma = topk_uses_fma(MMA_);  // MMA=4: MMA 0's loop, fp32 products by FFMA
  static constexpr bool kTmaProducer = topk_uses_tma(MMA_);
  static constexpr bool kPingPong = MMA_ == 3;
  static constexpr int kCluster = CLUSTER_;
  static constexpr int kPrefetchTiles = PREFETCH_;  // L2 prefetch distance in tiles (params.cuh topk_prefetch_ok)
  // query rows of a stage (BLOCK_Q, rounded up to whole 8-row atoms per cluster block) and of one block's part
  static constexpr int kQueryRows = topk_query_rows(BLOCK_Q_, CLUSTER_);
  static constexpr int kQueryPartRows = kQueryRows / CLUSTER_;
  static constexpr int kWarps = kWarpsN * kWarpsQ;  // the MMA (and top-k) warps
  static constexpr int kWarpgroups = kWarps / 4;  // wgmma path (kWarps is 4 or 8 there)
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kLaunchThreads = topk_launch_threads(kWarps, kMma);  // + MMA 2, 3's producer warpgroup
  // tile groups: warps that share a tile (all of them, or with ping-pong one warpgroup each)
  static constexpr int kGroups = topk_tile_groups(kMma);
  static constexpr int kGroupWarps = kWarps / kGroups;
  static constexpr int kGroupThreads = 32 * kGroupWarps;
  static constexpr int kTileWarpgroups = kPingPong ? 1 : kWarpgroups;  // warpgroups splitting a tile's rows
  // MMA 2, 3 with two MMA warpgroups: registers per thread after the reconfiguration (128 x 24 + 256 x 240 =
  // 384 x 168, the launch's allocation)
  static constexpr bool kMoveRegisters = kTmaProducer && kWarps == 8;
  // MERGE=7: the producer warpgroup's filter warps select a column's bound from 32 row groups' maxima in registers
  // (filter_warps_run()): 128 x 120 + 256 x 192 = 384 x 168 (ptxas of CUDA 13.0 spills with 72 and fewer for them)
  static constexpr int kProducerRegs = topk_filter_warps(MERGE_) ? 120 : 24;
  static constexpr int kMmaRegs = topk_filter_warps(MERGE_) ? 192 : 240;
  static constexpr int kElemBytes = ElemInfo<kDtype>::kBytes;
  static constexpr int kRowBytes = kBlockK * kElemBytes;  // one pipeline slice of a row
  static constexpr int kKSteps = kRowBytes / 32;
  static constexpr int kWarpN = kBlockN / kWarpsN;
  // m16 (mma.sync) or m64 (wgmma) row blocks per warp, and the distance between a warp's consecutive blocks
  static constexpr int kMT = kWgmma ? kBlockN / (64 * kTileWarpgroups) : kWarpN / 16;
  static constexpr int kMtStride = kWgmma ? 64 : 16;
  // slices loaded ahead of the one being multiplied (wgmma keeps the previous slice's MMA in flight)
  static constexpr int kPrefetch = kWgmma ? kStages - 2 : kStages - 1;
  static constexpr int kWarpQ = kBlockQ / kWarpsQ;
  static constexpr int kNT = kWarpQ / 8;
  // The score tile holds EPI_ROWS corpus rows of every query column; longer tiles are handled in several passes
  // (BLOCK_N = 256 with 128: the full tile would not fit next to the pipeline; 64 shrinks the tile further so
  // that two blocks fit on an SM and one's top-k epilogue overlaps the other's main loop).
  static constexpr int kEpiRows = kBlockN < EPI_ROWS_ ? kBlockN : EPI_ROWS_;
  static constexpr int kEpiPasses = kBlockN / kEpiRows;
  static constexpr int kR = kEpiRows / 32;                // keys per lane per column
  static constexpr int kScorePitch = kEpiRows + 4;        // floats; = 4 mod 32: conflict-free fragment stores
  static constexpr bool kNorms = kMetric != kIP;
  using Layout = SmemRowLayout<kRowBytes, 1>;
  // thread lists (MERGE 3, 4): capacity, threads per query column in a tile group, the rows of a pass each one
  // scans, and the parts of a column in the whole block
  static constexpr bool kThreadLists = topk_thread_lists(kMerge);
  // MERGE=5: no running top-k, every key goes to the dense key matrix (dense_epilogue()); no score tile, scratch or
  // list bookkeeping in shared memory
  static constexpr bool kDense = topk_dense(kMerge);
  // MERGE=6: no running top-k either; the keys that reach their query's bar go to its candidate row (filter_epilogue())
  // MERGE=6 alone: the MMA warps' filtered epilogue (6 and 7 both write candidate rows: topk_candidate_rows())
  static constexpr bool kFiltered = kMerge == kMergeFiltered;
  // MERGE=7: the MMA warps copy every key of a tile to one shared score tile (dump_epilogue()), and the producer
  // warpgroup's other three warps filter it into the candidate rows of MERGE=6 (filter_warps_run())
  static constexpr bool kFilterWarps = topk_filter_warps(kMerge);
  static constexpr bool kNoLists = !topk_keeps_lists(kMerge);
  static constexpr int kHolders = topk_column_holders(kGroupWarps, kWarpsQ);
  static constexpr int kFilterPitch = topk_filter_pitch(kGroupWarps, kWarpsQ);
  static constexpr int kListCap = kThreadLists ? thread_list_capacity(kMerge) : 1;
  static constexpr int kParts = thread_list_parts(kGroupThreads, kBlockQ);
  static constexpr int kPartRows = kEpiRows / kParts;
  static constexpr int kListParts = topk_list_parts(kThreads, kBlockQ, kMma);

  static constexpr int kATileBytes = kBlockN * kRowBytes;
  static constexpr int kBTileBytes = kQueryRows * kRowBytes;
  static constexpr int kStageBytes = kATileBytes + kBTileBytes;
  static constexpr int kScoreOffset = kStages * kStageBytes;
  // per tile group; MERGE=6: the filter region instead, per column its holders' maxima, its bound and (group 0's)
  // the block's count (topk_filter_pitch())
  // MERGE=7: one score tile for the block (topk_filter_tile_bytes()), the filter warps' words and mbarriers
  static constexpr int kScoreBytes = kFilterWarps ? topk_filter_tile_bytes(kBlockQ, kBlockN)
                                     : kFiltered  ? kBlockQ * kFilterPitch * 4
                                     : kDense     ? 0
                                                  : kBlockQ * kScorePitch * 4;
  static constexpr int kScoreRegions = kFilterWarps ? 1 : kGroups;
  static constexpr int kScratchOffset = kScoreOffset + kScoreRegions * kScoreBytes;
  static constexpr int kScratchBytes = kThreadLists || kNoLists ? 0 : kWarps * kEpiRows * 8;  // per warp: keys, indices
  static constexpr int kNormOffset = kScratchOffset + kScratchBytes;
  static constexpr int kNormBytes = kNorms ? kBlockN * 4 : 0;  // squared norms of a tile's corpus rows (per group)
  static constexpr int kMetaOffset = kNormOffset + kGroups * kNormBytes;
  // {len, sel, thr_key, thr_idx} per query, then the pre-check's hit flags: [WARPS_N][BLOCK_Q] ints (one writer
  // each: lane g == 0 of a quad column group in warp row warp_n); thread lists: each part's k-th key,
  // [PARTS][BLOCK_Q] floats (their pre-check fills candidate queues instead of flags)
  static constexpr int kMetaBytes = kNoLists       ? 0
                                    : kThreadLists ? kListParts * kBlockQ * 4
                                                   : kBlockQ * 16 + kWarpsN * kBlockQ * 4;
  // Thread lists: the candidate queue of query column c lives in the group's score tile, in column c's stretch of
  // SP floats: keys at [0, kQueueCap), indices at [kQueueCap, 2 kQueueCap), the slot count at EPI (the pitch's
  // padding, which the store-and-scan path neither writes nor reads, so the count survives it). The queue takes
  // the whole stretch (32 entries with 64-row epilogues, 64 with 128). An overflow is rare but not free: it sends
  // the tile down the store-and-scan path, and with few tiles per split that block's end is the kernel's (see
  // list_bar() for the case that did it at 50K / 100, and similarity_probe.py --trace, which names the block, tile,
  // column and reason of each).
  static constexpr int kQueueCap = kEpiRows / 2;
  // MMA 2, 3: the full[STAGES] and empty[STAGES] mbarriers of the TMA ring; MMA=3: then order[2], which hands the
  // tensor cores from one warpgroup's main loop to the other's (see run())
  static constexpr int kBarOffset = kMetaOffset + kMetaBytes;
  static constexpr int kBarBytes = topk_mbarrier_bytes(kMma, kStages);
  static constexpr int kListOffset = kBarOffset + kBarBytes;
  // Dynamic shared memory = kStaticSmemBytes + topk_list_bytes(): two list buffers of keys and indices per query,
  // or (thread lists) the lists parts 1.. hand to part 0 at the end of a split.
  static constexpr int kStaticSmemBytes = kListOffset;

  static_assert(kDtype == kF16 || kDtype == kBF16 || kDtype == kF32, "search dtypes: fp16, bf16, fp32");
  static_assert(kMetric >= kIP && kMetric <= kL2, "metric code 0..2");
  static_assert(kBlockN == 64 || kBlockN == 128 || kBlockN == 256 || (kBlockN == 192 && kPingPong),
                "BLOCK_N must be 64, 128 or 256 (192: MMA=3)");
  static_assert(kBlockN % kEpiRows == 0, "whole epilogue passes (BLOCK_N = 192: EPI_ROWS = 64)");
  static_assert(kBlockQ % 8 == 0 && kBlockQ >= 8 && kBlockQ <= 128, "BLOCK_Q must be a multiple of 8 up to 128");
  static_assert(kRowBytes == 64 || kRowBytes == 128 || kRowBytes == 256, "BLOCK_K * element bytes: 64, 128, 256");
  static_assert(kPingPong ? kBlockN % 64 == 0 : kBlockN % (16 * kWarpsN) == 0,
                "BLOCK_N must be a multiple of 16 * WARPS_N (MMA=3, a warpgroup per tile: of 64)");
  static_assert(kBlockQ % (8 * kWarpsQ) == 0, "BLOCK_Q must be a multiple of 8 * WARPS_Q");
  static_assert(kThreads >= 64 && kThreads <= 512, "2 to 16 warps");
  static_assert(kStages >= 2 && kStages <= 6, "STAGES 2..6");
  static_assert(kVec == 4 || kVec == 8 || kVec == 16, "VEC 4, 8 or 16 bytes");
  static_assert(kMerge >= 0 && kMerge <= 7,
                "MERGE 0 (rank), 1 (bitonic), 2 (hybrid), 3 / 4 (thread lists), 5 (dense), 6 (filtered), 7 (filter "
                "warps)");
  static_assert(!kFilterWarps || kTmaProducer, "MERGE=7: the producer warpgroup's warps filter (MMA 2, 3)");
  static_assert(EPI_ROWS_ == 64 || EPI_ROWS_ == 128, "EPI_ROWS 64 or 128");
  static_assert(kMinBlocks == 1 || kMinBlocks == 2, "MIN_BLOCKS 1 or 2");
  static_assert(!kThreadLists || kPartRows % 4 == 0, "thread lists: float4 reads of each part's rows");
  static_assert(!kThreadLists || kThreads >= kBlockQ, "thread lists: a thread per query column at least");
  static_assert(kStageBytes % 128 == 0 && kScoreBytes % 16 == 0, "region alignment");
  static_assert(kMma >= 0 && kMma <= 4,
                "MMA 0 (mma.sync), 1 (wgmma), 2 (wgmma, TMA producer), 3 (2, ping-pong) or 4 (0 with fp32 FFMA)");
  static_assert(!kFma || (kDtype == kF32 && kNT == 1), "MMA=4 (FFMA): fp32 inputs, BLOCK_Q = 8 * WARPS_Q");
  static_assert(!kWgmma || kDtype == kF16 || kDtype == kBF16, "wgmma path: fp16 and bf16 only");
  static_assert(!kWgmma || kRowBytes == 128, "wgmma path: 128-byte row slices (BLOCK_K = 64), the SWIZZLE_128B atom");
  static_assert(!kWgmma || (kWarpsQ == 1 && (kWarpsN == 4 || kWarpsN == 8)), "wgmma path: WARPS_Q = 1, WARPS_N 4 or 8");
  static_assert(!kWgmma || kBlockN % (64 * kTileWarpgroups) == 0, "wgmma path: BLOCK_N a multiple of 64 per warpgroup");
  static_assert(!kWgmma || kTmaProducer || kStages >= 3,
                "wgmma path: STAGES >= 3 (one slice in flight on the tensor cores)");
  static_assert(kMetaBytes % 8 == 0, "mbarriers are 8-byte aligned");
  static_assert(!kTmaProducer || kMinBlocks == 1, "MMA 2, 3: MIN_BLOCKS = 1 (the register reconfiguration's sizes)");
  static_assert(!kPingPong || (kWarps == 8 && (kThreadLists || kNoLists)),
                "MMA=3: two MMA warpgroups (WARPS_N = 8), MERGE 3 .. 7");
  static_assert(!kWgmma || kStageBytes % 1024 == 0, "wgmma path: 1024-byte aligned tiles (SWIZZLE_128B atoms)");
  static_assert(topk_cluster_ok(kCluster, kMma), "CLUSTER 1, or 2 or 4 with MMA 2, 3 (TMA multicast)");
  static_assert(topk_prefetch_ok(kPrefetchTiles, kMma), "PREFETCH 0, or 1 or 2 with MMA 2, 3 (TMA L2 prefetch)");
};

template <class Tr>
struct TopkBlock {
  using L = typename Tr::Layout;
  static constexpr int BN = Tr::kBlockN, BQ = Tr::kBlockQ, BK = Tr::kBlockK;
  static constexpr int MT = Tr::kMT, NT = Tr::kNT, R = Tr::kR, EPI = Tr::kEpiRows, SP = Tr::kScorePitch;
  using Mma = WarpMma<Tr::kDtype, MT, NT, Tr::kNorms, false, false, Tr::kFma>;  // a warp's accumulators

  const SearchParams& p;
  unsigned char* smem;
  int tid, lane, warp, warp_n, warp_q, q0, KT;
  int grp;  // tile group (ping-pong: the warpgroup; else 0) and this thread's index in it
  int gtid;
  unsigned crank;  // rank of this block in its cluster (0 without clusters)
  int wg_row0;   // wgmma: tile row of this warpgroup's first m64 block (ping-pong: 0, the warpgroup owns the tile)
  int row_base;  // tile row of this warp's first accumulator row block
  float* scores;
  float* norms;
  float* skey;
  int* sidx;
  int* meta;
  int* hits;  // shared lists, [WARPS_N][BQ]: the tile has a key beating column c's threshold, seen by warp row warp_n
  float* lkey;
  int* lidx;
  // thread lists: this thread's column, its part in the tile group (>= PARTS: no list) and in the block, the parts'
  // k-th keys, its own list
  static constexpr int PARTS = Tr::kParts, PR = Tr::kPartRows, LIST_PARTS = Tr::kListParts;
  static constexpr int QCAP = Tr::kQueueCap;
  // Bound pass (thread lists; see bound_pass()): the threads holding one query column's accumulators in a tile
  // group (8 lanes of every warp row), each a disjoint set of the tile's rows; the pass needs one float of the
  // column's score-tile stretch per holder.
  static constexpr int HOLDERS = Tr::kHolders;
  static constexpr bool kBounds = Tr::kThreadLists && HOLDERS <= EPI;
  // With 32 holders (a warpgroup's tile), one thread selects a column's bound from its 32 maxima in registers
  // (lane_kth_largest_of_32), 32 columns per warp at once: the thread lists with k <= 16 (MERGE 3) and the filtered
  // search (MERGE=6, k <= 32). The warps' shuffle selections of 8 columns at a time took ~3,300 instructions per
  // warp and pass (ncu at 50K / 100), and on the H200 the thread lists' first tile's bound pass and pre-check went
  // from 12.0 to 9.0 us with this (similarity_probe.py --trace). MERGE 4 (k <= 32) keeps the shuffles, and so do
  // configs whose registers the 16 values would spill (sm_90, ptxas of CUDA 13.0): more than 104 accumulators, and
  // cosine (its row terms stay live).
  static constexpr bool kLaneBounds = ((kBounds && Tr::kListCap == 16) || Tr::kFiltered) && HOLDERS == 32 &&
                                      NT <= 13 && MT <= 2 && Tr::kMetric != kCosine && BQ <= 32 * Tr::kGroupWarps;
  int tl_col, tl_lpart, tl_part;
  bool tl_live;  // this thread keeps a list: a part of a real (not padding) query column
  float* part_bar;  // [LIST_PARTS][BQ]
  ThreadTopk<Tr::kListCap> tl;

  __device__ __forceinline__ TopkBlock(const SearchParams& params, unsigned char* s) : p(params), smem(s) {
    tid = static_cast<int>(threadIdx.x);
    lane = tid & 31;
    warp = tid >> 5;
    warp_n = warp % Tr::kWarpsN;
    warp_q = warp / Tr::kWarpsN;
    q0 = static_cast<int>(blockIdx.x) * BQ;
    KT = (p.d + BK - 1) / BK;
    grp = Tr::kPingPong ? warp / 4 : 0;
    gtid = tid - grp * Tr::kGroupThreads;
    if constexpr (Tr::kCluster > 1) crank = cluster::ctarank();
    else crank = 0;
    wg_row0 = Tr::kPingPong ? 0 : (warp / 4) * MT * 64;
    if constexpr (Tr::kWgmma) row_base = wg_row0 + (warp % 4) * 16;
    else row_base = warp_n * Tr::kWarpN;
    scores = reinterpret_cast<float*>(smem + Tr::kScoreOffset + grp * Tr::kScoreBytes);
    norms = reinterpret_cast<float*>(smem + Tr::kNormOffset + grp * Tr::kNormBytes);
    skey = reinterpret_cast<float*>(smem + Tr::kScratchOffset) + warp * 2 * EPI;
    sidx = reinterpret_cast<int*>(skey + EPI);
    meta = reinterpret_cast<int*>(smem + Tr::kMetaOffset);
    part_bar = reinterpret_cast<float*>(meta);
    hits = meta + 4 * BQ;  // (shared lists only)
    lkey = reinterpret_cast<float*>(smem + Tr::kListOffset);
    lidx = reinterpret_cast<int*>(lkey + (Tr::kThreadLists ? LIST_PARTS - 1 : 2) * BQ * p.k);
    tl_col = gtid % BQ;
    tl_lpart = gtid / BQ;
    tl_part = grp * PARTS + tl_lpart;
    tl_live = Tr::kThreadLists && tl_lpart < PARTS && q0 + tl_col < p.nq;
  }

  // Shared lists: the bar of column col that the pre-check tests keys against, its list's k-th entry.
  __device__ __forceinline__ void column_bar(int col, float& tk, int& ti) const {
    tk = lds(reinterpret_cast<const float*>(meta + 4 * col + 2));
    ti = lds(meta + 4 * col + 3);
  }
  // Thread lists: column col's bar, the largest of its parts' k-th keys and of this tile group's bound for it
  // (column_bound()), which a key passes when it is >= it. It never falls: each term only rises. (The bound kept
  // in part 0's bar instead, one load less per column, measured 64 against 54 us at 50K / 100 at ce65595,
  // results/similarity_probe_stream_mends*.json; probably because the other tile group then takes it as its bar
  // and skips its own bound pass.)
  // With ping-pong, `cross` adds the other tile group's bound: its k keys at least as large reach that group's
  // lists, which the split's list merges, so it is as valid a bar here. It lifts a group's second tile, whose own
  // terms may still be its first tile's bound, when that alone would let more keys through than a queue holds
  // (at 50K / 100, one random draw of twelve did: 33 keys, and that block's store-and-scan took the search from
  // 43 to 58 us). The bound pass asks without it (`need`), so that each group still bounds its own first tile.
  // The other group writes its bound once per split while this one may read it: either value is a valid bar.
  __device__ __forceinline__ float list_bar(int col, bool cross = true) const {
    float tk = lds(part_bar + col);
#pragma unroll
    for (int q = 1; q < LIST_PARTS; ++q) tk = fmaxf(tk, lds(part_bar + q * BQ + col));
    if constexpr (kBounds) {
      tk = fmaxf(tk, lds(column_bound(col)));
      if constexpr (Tr::kGroups == 2) {
        if (cross) tk = fmaxf(tk, lds(other_column_bound(col)));
      }
    }
    return tk;
  }
  // This thread's part publishes its list's k-th key as its bar.
  __device__ __forceinline__ void publish_bar() const { sts(part_bar + tl_part * BQ + tl_col, tl.bar_key()); }

  // Timeline of a block (diagnosis build: TUNELAB_SIM_TRACE, compile_search(trace=True), used by
  // benchmarks/similarity_probe.py --trace): block b = blockIdx.y * gridDim.x + blockIdx.x writes event `slot`'s
  // %globaltimer (ns, comparable across SMs) to u64 entry b * 2 * kTraceSlots + slot of cand_key, and its clock64
  // (cycles of this SM) to entry + kTraceSlots; the build writes no candidate keys there, so its search results
  // are meaningless. The slots (kTrace*) are in params.cuh.
#ifdef TUNELAB_SIM_TRACE
  static constexpr bool kTrace = true;
#else
  static constexpr bool kTrace = false;
#endif
// TUNELAB_SIM_TRACE_KEYS=1 (benchmarks/similarity_probe.py --trace ... --define TUNELAB_SIM_TRACE_KEYS=1): the dense
// search's diagnosis build stores its keys too, all but query 0's, whose row holds the timelines, so that the
// timelines show where the stores' time goes (benchmarks/SIMILARITY.md, "Where the stores' time goes").
#ifndef TUNELAB_SIM_TRACE_KEYS
#define TUNELAB_SIM_TRACE_KEYS 0
#endif
  int trace_turn = 0;  // this tile group's turn (the epilogue's events)
  // This block's timeline in the candidate-key buffer: kTraceSlots u64 stamps, then as many clock64 values.
  __device__ __forceinline__ unsigned long long* trace_slots() const {
    return reinterpret_cast<unsigned long long*>(p.cand_key) +
           (static_cast<long long>(blockIdx.y) * gridDim.x + blockIdx.x) * 2 * kTraceSlots;
  }
  __device__ __forceinline__ void trace(int slot) const {
#ifdef TUNELAB_SIM_TRACE
    unsigned long long* t = trace_slots();
    t[slot] = globaltimer_ns();
    t[kTraceSlots + slot] = static_cast<unsigned long long>(clock64());
    if (slot == kTraceEntry) {
      unsigned smid;
      asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));
      t[kTraceSmid] = smid;
    }
#else
    (void)slot;
#endif
  }
  // Why a group's pre-check sent its tile to the store-and-scan path, as one u64 (not a time): bits 62-63 the
  // reason (1: a key passed a bar still at -inf, 2: a queue overflowed), 0-15 the column, 16-31 the tile, 32-47
  // the keys that passed (2: the queue's count with them). Any one thread's report; the last tile's wins.
  __device__ __forceinline__ void trace_why(unsigned long long reason, int col, int tile, int count) const {
#ifdef TUNELAB_SIM_TRACE
    trace_slots()[kTraceWhy + grp] = reason << 62 | static_cast<unsigned long long>(count & 0xffff) << 32 |
                                     static_cast<unsigned long long>(tile & 0xffff) << 16 | (col & 0xffff);
#else
    (void)reason, (void)col, (void)tile, (void)count;
#endif
  }
  __device__ __forceinline__ void trace_turn_event(int event) const {
    if (!kTrace || gtid != 0) return;
    const int u = trace_turn < kTraceTurns ? trace_turn : kTraceTurns - 1;
    trace(kTraceTurn0 + (grp * kTraceTurns + u) * 4 + event);
  }
  // MERGE=6, a group's first tile: step `step` of its epilogue is done (params.cuh kTraceFirst0).
  __device__ __forceinline__ void trace_first(int step) const {
    if (kTrace && gtid == 0) trace(kTraceFirst0 + grp * kTraceFirstSteps + step);
  }

  // Tile row of accumulator row block mt, half h (rows g and g + 8 of the fragment), for lane group g.
  __device__ __forceinline__ int row_of(int mt, int h, int g) const { return row_base + mt * Tr::kMtStride + g + 8 * h; }

  // Barrier of this thread's tile group: the whole block, or with a producer warpgroup (MMA 2, 3) named barrier
  // 1 + group over the group's warps.
  __device__ __forceinline__ void block_sync() const {
    if constexpr (Tr::kTmaProducer) mbar::named_sync(1 + grp, Tr::kGroupThreads);
    else __syncthreads();
  }
  __device__ __forceinline__ bool block_sync_or(bool pred) const {
    if constexpr (Tr::kTmaProducer) return mbar::named_sync_or(1 + grp, Tr::kGroupThreads, pred);
    else return __syncthreads_or(pred) != 0;
  }
  // Barrier of every MMA warp (all tile groups): block_sync() unless ping-pong, which uses named barrier 3.
  __device__ __forceinline__ void mma_warps_sync() const {
    if constexpr (Tr::kPingPong) mbar::named_sync(3, Tr::kThreads);
    else block_sync();
  }
  __device__ __forceinline__ unsigned stage_addr(int stage) const {
    return smem_u32(smem) + static_cast<unsigned>(stage * Tr::kStageBytes);
  }
  // MMA 2, 3: stage s's full and empty mbarriers
  __device__ __forceinline__ unsigned full_bar(int s) const {
    return smem_u32(smem) + static_cast<unsigned>(Tr::kBarOffset + 8 * s);
  }
  __device__ __forceinline__ unsigned empty_bar(int s) const {
    return smem_u32(smem) + static_cast<unsigned>(Tr::kBarOffset + 8 * (Tr::kStages + s));
  }
  // MMA=3: group g's turn on the tensor cores (the other group's warps arrive when they leave a tile's main loop)
  __device__ __forceinline__ unsigned order_bar(int g) const {
    return smem_u32(smem) + static_cast<unsigned>(Tr::kBarOffset + 8 * (2 * Tr::kStages + g));
  }

  // MMA 2, 3: this warp is done with stage s (lane 0 arrives; with clusters on every block's empty[s], since every
  // producer of the cluster writes its query part into this block's stage).
  __device__ __forceinline__ void release(int s) const {
    if (lane != 0) return;
    mbar::arrive(empty_bar(s));
#pragma unroll
    for (int r = 1; r < Tr::kCluster; ++r)
      mbar::arrive_cluster(empty_bar(s), (crank + static_cast<unsigned>(r)) % Tr::kCluster);
  }

  __device__ __forceinline__ QueryList list_of(int c) const {
    QueryList ql;
    ql.key0 = lkey + c * p.k;
    ql.key1 = lkey + (BQ + c) * p.k;
    ql.idx0 = lidx + c * p.k;
    ql.idx1 = lidx + (BQ + c) * p.k;
    ql.meta = meta + 4 * c;
    return ql;
  }

  // cp.async the corpus and query slices of flattened iteration (tile, kc) into stage `stage`.
  __device__ __forceinline__ void load(int stage, int tile, int kc) {
    const unsigned base = smem_u32(smem) + static_cast<unsigned>(stage * Tr::kStageBytes);
    const int row0 = tile * BN;
    const long long ebytes = Tr::kElemBytes;
    const int bytes_valid = p.d * Tr::kElemBytes - kc * Tr::kRowBytes;
    const char* c = static_cast<const char*>(p.corpus) + (row0 * p.c_stride + static_cast<long long>(kc) * BK) * ebytes;
    load_tile<BN, Tr::kRowBytes, Tr::kVec, Tr::kThreads, L>(base, c, p.c_stride * ebytes, p.n - row0, bytes_valid, tid);
    const char* q = static_cast<const char*>(p.queries) + (q0 * p.q_stride + static_cast<long long>(kc) * BK) * ebytes;
    load_tile<BQ, Tr::kRowBytes, Tr::kVec, Tr::kThreads, L>(base + Tr::kATileBytes, q, p.q_stride * ebytes, p.nq - q0,
                                                           bytes_valid, tid);
  }

  // The accumulators of the tile rows of epilogue pass `pass` -> the score tile ([query column][row], rows past n
  // as NaN, which never enters a list).
  __device__ __forceinline__ void store_scores(const Mma& mma, int tile, int pass) {
    const int g = lane >> 2, t = lane & 3;
    const int row0 = tile * BN;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = row_of(mt, h, g);
        if (row / EPI != pass) continue;
        const bool valid = row0 + row < p.n;
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int col = query_col(nt, e, t);
            sts(scores + col * SP + (row - pass * EPI), valid ? mma.acc[mt][nt][2 * h + e] : f32_nan());
          }
        }
      }
    }
  }

  // Column c's candidate queue in the tile group's score tile (thread lists; see TopkTraits::kQueueCap).
  __device__ __forceinline__ float* queue_keys(int c) const { return scores + c * SP; }
  // The index slot that goes with a queue's key slot.
  static __device__ __forceinline__ int* queue_slot_idx(float* key_slot) {
    return reinterpret_cast<int*>(key_slot + QCAP);
  }
  __device__ __forceinline__ int* queue_idx(int c) const { return queue_slot_idx(queue_keys(c)); }
  __device__ __forceinline__ int* queue_count(int c) const { return reinterpret_cast<int*>(scores + c * SP + EPI); }
  // Column c's bound from a bound pass of this tile group (-inf until one sets it), next to the queue count.
  __device__ __forceinline__ float* column_bound(int c) const { return scores + c * SP + EPI + 1; }
  // Ping-pong: the other tile group's bound for column c (its score tile is the neighbouring one).
  __device__ __forceinline__ float* other_column_bound(int c) const {
    return column_bound(c) + (grp == 0 ? 1 : -1) * (Tr::kScoreBytes / 4);
  }

  // The metric as the thread-list paths and the shared lists' pre-check apply it, in one place so that every path
  // computes the same bits: the term of tile row `row` (cosine: 1 / max(|c|, 1e-12); l2: -|c|^2; ip: none) and
  // the key of a dot product with that row.
  __device__ __forceinline__ float metric_term(int row) const {
    if constexpr (Tr::kMetric == kCosine) return rsqrtf(fmaxf(lds(norms + row), 1e-24f));
    if constexpr (Tr::kMetric == kL2) return -lds(norms + row);
    return 0.f;
  }
  static __device__ __forceinline__ float metric_key(float dot, float term) {
    if constexpr (Tr::kMetric == kCosine) return dot * term;
    if constexpr (Tr::kMetric == kL2) return fmaf(2.f, dot, term);
    return dot;
  }
  // Query column of accumulator element e of n8 tile nt, for lane column t = lane & 3 (the callers keep t live:
  // recomputing lane & 3 at every use made ptxas spill in the pre-check).
  __device__ __forceinline__ int query_col(int nt, int e, int t) const {
    return warp_q * Tr::kWarpQ + nt * 8 + 2 * t + e;
  }

  // Per accumulator row (mt, h) of this thread: whether the row is in the corpus, and the metric's term, so that
  // key_of() computes a key as the store-and-scan path does.
  struct RowTerms {
    float nrm[MT][2];
    bool valid[MT][2];
  };
  __device__ __forceinline__ RowTerms row_terms(int tile) const {
    const int g = lane >> 2;
    const int row0 = tile * BN;
    const bool whole = row0 + BN <= p.n;
    RowTerms rt;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = row_of(mt, h, g);
        rt.valid[mt][h] = whole || row0 + row < p.n;
        rt.nrm[mt][h] = metric_term(row);
      }
    }
    return rt;
  }
  // The key of accumulator (mt, nt, 2 h + e) with the metric applied, whether or not its row is in the corpus
  // (key_raw), and as the lists see it: NaN for a row past n (key_of).
  __device__ __forceinline__ float key_raw(const Mma& mma, const RowTerms& rt, int mt, int nt, int h, int e) const {
    return metric_key(mma.acc[mt][nt][2 * h + e], rt.nrm[mt][h]);
  }
  __device__ __forceinline__ float key_of(const Mma& mma, const RowTerms& rt, int mt, int nt, int h, int e) const {
    return rt.valid[mt][h] ? key_raw(mma, rt, mt, nt, h, e) : f32_nan();
  }

  // The bound passes' first step (thread lists' and MERGE=6's): each holder of a column's accumulators (8 lanes of
  // every warp row of the group) stores the largest of its keys of the tile (rows past n and NaN keys left out) at
  // scores + column * pitch + holder.
  __device__ __forceinline__ void store_holder_maxima(const Mma& mma, const RowTerms& rt, int pitch) {
    const int g = lane >> 2, t = lane & 3;
    const int holder = (warp_n % (Tr::kGroupWarps / Tr::kWarpsQ)) * 8 + g;
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int col = query_col(nt, e, t);
        float m = -f32_inf();
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
          for (int h = 0; h < 2; ++h) m = fmaxf(m, key_of(mma, rt, mt, nt, h, e));  // fmaxf drops NaN
        sts(scores + col * pitch + holder, m);
      }
    }
  }

  // Bound pass (thread lists, the first tile of a tile group in a split: no list is full, every key would pass
  // and the store-and-scan path would insert most of the tile's rows one by one, the whole warp waiting on each
  // insert). It sets a bound for each column that still has no bar (with ping-pong the other group's lists may
  // already give one); later tiles need none, since the bound stays. Each holder of a column's accumulators
  // offers the largest of its keys; the k-th largest of those maxima is a bound: k holders supply k distinct keys
  // at least as large, which reach the column's lists (through its queue or the store-and-scan path, both of
  // which take every key >= the bar), so nothing below it is in the column's top k. With 32 holders of 4 rows,
  // ~11 keys per column then pass at k = 10 (a queue holds 32). The maxima go to the column's score-tile stretch
  // (the queue's slots: the queue is empty until the pre-check after this pass); a warp takes the k-th largest
  // of each of its columns' maxima and stores it as the column's bound. Columns with fewer than k rows that are
  // not NaN keep -inf (the store-and-scan path takes them).
  __device__ __forceinline__ void bound_pass(const Mma& mma, const RowTerms& rt) {
    store_holder_maxima(mma, rt, SP);
    block_sync();
    // (with ping-pong the other group may raise a part's bar meanwhile); padding columns get no bound
    select_bounds(
        SP, [&](int c) { return q0 + c < p.nq && list_bar(c, false) == -f32_inf(); },
        [&](int c, float bound) { sts(column_bound(c), bound); });
    block_sync();  // the bounds are set, and the maxima read before the queues reuse their slots
  }
  // The bound passes' selection (thread lists' and MERGE=6's), after each holder's maximum is stored at scores +
  // column * pitch + holder: for each column c for which need(c) holds, the k-th largest of its maxima goes to
  // store(c, bound); by one thread per column (kLaneBounds) or by warp shuffles.
  template <class Need, class Store>
  __device__ __forceinline__ void select_bounds(int pitch, Need need, Store store) {
    if constexpr (kLaneBounds) {
      const int c = (gtid >> 5) * 32 + lane;  // warp w of the group selects columns 32 w .. 32 w + 31
      const bool take = c < BQ && need(c);
      if (ballot(take) != 0) {
        const float b = lane_kth_largest_of_32<Tr::kFiltered>(scores + (take ? c : 0) * pitch, p.k);
        if (take) store(c, b);
      }
    } else {
      select_bounds_shuffles(pitch, need, store);
    }
  }
  // select_bounds() by warp shuffles (configs without kLaneBounds): lane 0 asks need(c) for the whole warp and
  // calls store(c, bound). A warp takes B
  // columns at a time (one selection's shuffle chain is latency-bound: on the H200 one column at a time made the
  // pass ~6 us at nq = 100; 8 at once spill next to 128 query columns' accumulators). With more holders than lanes a
  // lane offers the largest of its holders' maxima (still k distinct keys at least as large).
  template <class Need, class Store>
  __device__ __forceinline__ void select_bounds_shuffles(int pitch, Need need, Store store) {
    constexpr int B = NT > 13 ? 4 : 8;
#pragma unroll 1
    for (int c0 = gtid >> 5; c0 < BQ; c0 += B * Tr::kGroupWarps) {
      float x[B];
      bool take[B];
#pragma unroll
      for (int b = 0; b < B; ++b) {
        const int c = c0 + b * Tr::kGroupWarps;
        int t = 0;
        if (lane == 0 && c < BQ) t = need(c) ? 1 : 0;
        take[b] = shfl_i(t, 0) != 0;
        x[b] = -f32_inf();
        if (take[b]) {
          for (int j = lane; j < HOLDERS; j += 32) x[b] = fmaxf(x[b], lds(scores + c * pitch + j));
        }
      }
      warp_kth_largest_n<B>(x, p.k, lane);
      if (lane == 0) {
#pragma unroll
        for (int b = 0; b < B; ++b)
          if (take[b]) store(c0 + b * Tr::kGroupWarps, x[b]);
      }
    }
  }

  // Thread-list store-and-scan (a candidate queue overflowed, or a key passed a bar still at -inf): pass by pass,
  // the score tile is filled, and each thread scans its column's share of the rows against the bar and its own
  // list. The column's bar is read once, before the first pass's barrier; its parts publish their new k-th keys
  // after the last pass, and part 0 clears the column's queue count (the next pre-check follows the next main
  // loop's barriers, or with MMA 2, 3 the barrier that opens the next epilogue).
  __device__ __forceinline__ void store_and_scan(const Mma& mma, int tile) {
    const int c = tl_col;
    const bool mine = tl_live;
    const float bar = mine ? list_bar(c) : -f32_inf();
    const int row0 = tile * BN;
#pragma unroll
    for (int pass = 0; pass < Tr::kEpiPasses; ++pass) {
      if (pass > 0) block_sync();  // the previous pass's scans are done with the score tile
      store_scores(mma, tile, pass);
      block_sync();
      if (!mine) continue;
      const int r0 = pass * EPI + tl_lpart * PR;  // first tile row this thread scans in this pass
      const float* col = scores + c * SP + tl_lpart * PR;
      const int id0 = static_cast<int>(p.index_base + row0 + r0);
      // Four rows at a time; most quads are rejected by their largest key. The quad's keys are walked by
      // shifting (not indexing), so that the insertion is inlined once: a small loop body keeps the main loop's
      // code in the instruction cache.
#pragma unroll 1
      for (int j = 0; j < PR; j += 4) {
        const float4 s4 = lds4(col + j);
        float k4[4] = {s4.x, s4.y, s4.z, s4.w};  // NaN (rows past n) stays NaN and fails every test
#pragma unroll
        for (int e = 0; e < 4; ++e) k4[e] = metric_key(k4[e], metric_term(r0 + j + e));
        const float top = fmaxf(fmaxf(k4[0], k4[1]), fmaxf(k4[2], k4[3]));  // fmaxf drops NaN
        if (!(top >= fmaxf(bar, tl.bar_key()))) continue;
#pragma unroll 1
        for (int e = 0; e < 4; ++e) {
          const float key = k4[0];
          const int id = id0 + j + e;
          if (key >= bar && tl.admits(key, id)) tl.insert(key, id);
          k4[0] = k4[1];
          k4[1] = k4[2];
          k4[2] = k4[3];
        }
      }
    }
    if (mine) {
      publish_bar();
      if (tl_lpart == 0) sts(queue_count(c), 0);
    }
  }

  // Thread lists after the main loop: the pre-check appends every key that is at least its column's bar to the
  // column's queue (keys of rows past n are NaN and padding columns have a NaN bar: neither passes); one barrier
  // tells whether a queue overflowed, and if none did part 0 of each column inserts its queue into its list
  // (the exact rule: the queue holds keys >= bar, most of which a part's list still rejects). A tile group's first
  // tile of the split (`first`) runs the bound pass before. A thread reserves the slots of all its passing keys of
  // a column with one atomic; it stops appending once it has seen an overflow or a key that passes a bar still at
  // -inf (no list of the column is full and there is no bound: every key passes, the queue would overflow), since
  // the tile then takes the store-and-scan path, which needs no queue.
  // The keys are computed as the store-and-scan path computes them (key_of()), so both paths offer the same bits.
  // (Warp-aggregated appends, a ballot per accumulator and one atomic per column and warp in uniform control flow,
  // were measured at 7b3fe87 and dropped: no faster at 50K / 100, 5% slower at 1M / 100, 1.7x slower on all-tie
  // input; results/similarity_probe_stream_aggregated.json.)
  __device__ __forceinline__ void queue_epilogue(const Mma& mma, int tile, bool first) {
    const int g = lane >> 2, t = lane & 3;
    const int row0 = tile * BN;
    const RowTerms rt = row_terms(tile);
    if constexpr (kBounds) {
      if (first) bound_pass(mma, rt);
    }
    // Columns in chunks of CN n8 tiles (2 CN columns), in phases so that no shared-memory round trip waits on
    // another of the chunk: every column's bar (independent loads), then how many of this thread's keys pass it,
    // then one atomic per column with a passing key (its slots base .. base + count - 1), then the stores. The
    // stores are predicated, not branched around: this code runs on one warp per scheduler, where every
    // instruction of a warp counts (a chunk no lane of the warp has a key for is skipped whole). With one atomic
    // per passing key, each waited on before the next, and branches around each store, the pre-check was ~2,600
    // instructions per warp and tile (ncu at 50K / 100) and 8-9 us of a tile turn at 1M / 100, 6.7 with
    // this (similarity_probe.py --trace). The stores then took their slot check and address per accumulator: with
    // a word of pass flags and a running address per column (below) the pre-check's SASS went from 2,152 to 1,587
    // instructions (nq = 100 default) and on the H200 the 50K / 100 search from 43.3 to 40.9 us
    // (results/similarity_probe_stream_precheck*.json).
    constexpr int CN = NT > 13 || MT > 2 ? 1 : 3;  // more live values spill next to 112+ accumulators
    // A chunk's pass flags, one bit per accumulator: bit (2 j + e) * 2 MT + 2 mt + h, so each column's are a
    // contiguous group of 2 MT bits (a 64-bit word for mma.sync warps of more than 128 rows: MT = 16).
    constexpr int CB = 2 * MT;
    using Bits = typename FlagWord<(2 * CN * CB > 32)>::type;
    static_assert(2 * CN * CB <= 64, "a chunk's pass flags fit one 64-bit word");
    constexpr Bits kColBits = (Bits(1) << CB) - 1u;
    int rid[MT][2];  // corpus index of each accumulator row
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int h = 0; h < 2; ++h) rid[mt][h] = static_cast<int>(p.index_base + row0 + row_of(mt, h, g));
    bool overflow = false;
#pragma unroll
    for (int nt0 = 0; nt0 < NT; nt0 += CN) {
      float bar[CN][2];
      int cnt[CN][2], base[CN][2];
#pragma unroll
      for (int j = 0; j < CN; ++j) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int col = query_col(nt0 + j, e, t);
          bar[j][e] = nt0 + j < NT && q0 + col < p.nq ? list_bar(col) : f32_nan();  // padding: nothing passes
        }
      }
      Bits bits = 0;
#pragma unroll
      for (int j = 0; j < CN; ++j) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          if (nt0 + j >= NT) continue;
#pragma unroll
          for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int h = 0; h < 2; ++h)
              if (rt.valid[mt][h] && key_raw(mma, rt, mt, nt0 + j, h, e) >= bar[j][e])
                bits |= Bits(1) << ((2 * j + e) * CB + 2 * mt + h);
        }
      }
      bool some = false;
#pragma unroll
      for (int j = 0; j < CN; ++j) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          cnt[j][e] = popc(static_cast<unsigned>((bits >> ((2 * j + e) * CB)) & kColBits));
          // no list of the column is full and no bound: every key passes, the queue would overflow
          if (cnt[j][e] > 0 && bar[j][e] == -f32_inf()) {
            overflow = true;
            if constexpr (kTrace) trace_why(1, query_col(nt0 + j, e, t), tile, cnt[j][e]);
          }
          some = some || cnt[j][e] > 0;
        }
      }
      // after an overflow this tile takes the store-and-scan path, which needs no queue: no more atomics
      if (ballot(some && !overflow) == 0) continue;
      const bool open = !overflow;
#pragma unroll
      for (int j = 0; j < CN; ++j) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int col = query_col(nt0 + j, e, t);
          base[j][e] = open && cnt[j][e] > 0 ? atomic_add_shared(queue_count(col), cnt[j][e]) : 0;
        }
      }
      // A column whose slots run past the queue stores nothing (the tile then takes the store-and-scan path): its
      // flags are cleared, so that each store below needs only its flag, and a column's keys go to consecutive
      // slots from one running address (queue_slot_idx() gives each key slot's index slot).
#pragma unroll
      for (int j = 0; j < CN; ++j) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          if (nt0 + j >= NT) continue;
          if (open && cnt[j][e] > 0 && base[j][e] + cnt[j][e] > QCAP) {
            overflow = true;
            bits &= ~(kColBits << ((2 * j + e) * CB));
            if constexpr (kTrace) trace_why(2, query_col(nt0 + j, e, t), tile, base[j][e] + cnt[j][e]);
          }
        }
      }
      if (!open) bits = 0;
#pragma unroll
      for (int j = 0; j < CN; ++j) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          if (nt0 + j >= NT) continue;
          float* qk = queue_keys(query_col(nt0 + j, e, t)) + base[j][e];
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              if ((bits >> ((2 * j + e) * CB + 2 * mt + h)) & 1u) {
                sts(qk, key_raw(mma, rt, mt, nt0 + j, h, e));
                sts(queue_slot_idx(qk), rid[mt][h]);
                ++qk;
              }
            }
          }
        }
      }
    }
    const bool any_overflow = block_sync_or(overflow);
    trace_turn_event(2);
    if (any_overflow) {
      if (kTrace && gtid == 0) trace(kTraceScan + grp);
      store_and_scan(mma, tile);
      return;
    }
    if (!tl_live || tl_lpart != 0) return;
    const int c = tl_col;
    const int m = lds(queue_count(c));
    if (m == 0) return;
#pragma unroll 1
    for (int j = 0; j < m; ++j) {
      const float key = lds(queue_keys(c) + j);
      const int id = lds(queue_idx(c) + j);
      if (tl.admits(key, id)) tl.insert(key, id);
    }
    sts(queue_count(c), 0);
    publish_bar();
  }

  // MERGE=5: every key of the tile (metric applied) to the dense key matrix, [nq][dense_ld], at column tile row
  // (chunk-local: the launcher takes no index_base with it). Rows past n and padding query columns are not written.
  // A warp's store covers 8 consecutive rows of 4 query columns: four 32-byte sectors.
  // Measured against it and removed (H200, 50K / 100; TUNELAB_SIM_BAR_PROBE[_ANY,_SMEM] at 1dec25a, 95929d2 and
  // 9d1d8cd, results/similarity_key_stores_bar_probe{,_any,_smem}_h200.json; SIMILARITY.md, "A filter whose bars are
  // known"): a filter whose bars are known before the search starts (a pilot pass's), each key compared in its
  // registers with one constant bar and, at or above it, appended to its query's row. With every key of a tile
  // folded into one predicate first and no key passing, the search took 27.7 us (27.2 without stores); with 76
  // keys a query appended, slotted by a count per query in shared memory, 30.4; by a global atomic count, 32.4;
  // against this epilogue's 33.6 and 4x torch's 31.1. Branching on each key took the compares alone to 29.6.
  // Two more runs (07c6fe5 and b909d0c, _WALK and _SMEM=2, results/similarity_key_stores_bar_probe_{walk,ring}_h200
  // .json): walking only the n8 column blocks that hold a passing key, 76 a query took 29.8-30.2 us (no key passing
  // 27.5-28.1, storeless 27.4-27.6, 4x 31.1-31.2), and as long with the appends kept in a shared-memory ring, so
  // their cost is the walk and slots, not stores. That leaves ~1 us under 4x for the bars and a select: not enough.
  __device__ __forceinline__ void dense_epilogue(const Mma& mma, int tile) {
    const int g = lane >> 2, t = lane & 3;
    const RowTerms rt = row_terms(tile);
    const unsigned long long pol = key_store_policy();
    float* base = p.cand_key + static_cast<long long>(tile) * BN;
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int col = query_col(nt, e, t);
        if (q0 + col >= p.nq) continue;
        float* dst = base + static_cast<long long>(q0 + col) * p.dense_ld;
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
          for (int h = 0; h < 2; ++h)
            if ((!kTrace || (TUNELAB_SIM_TRACE_KEYS && q0 + col > 0)) && rt.valid[mt][h])
              store_key(dst + row_of(mt, h, g), key_raw(mma, rt, mt, nt, h, e), pol);
      }
    }
  }

  // MERGE=6 (filtered; params.cuh topk_candidate_rows()): the group's filter region holds per query column its holders'
  // maxima (first tile only), its bound (-inf until the group's bound pass sets it) and, in group 0's region, the
  // block's count of the column's appended keys.
  __device__ __forceinline__ float* filter_maxima(int c) const { return scores + c * Tr::kFilterPitch; }
  __device__ __forceinline__ float* filter_bound(int c) const { return scores + c * Tr::kFilterPitch + HOLDERS; }
  // Ping-pong: the other tile group's bound for column c (its filter region is the neighbouring one).
  __device__ __forceinline__ float* filter_other_bound(int c) const {
    return filter_bound(c) + (grp == 0 ? 1 : -1) * (Tr::kScoreBytes / 4);
  }
  __device__ __forceinline__ int* filter_count(int c) const {
    return reinterpret_cast<int*>(scores - grp * (Tr::kScoreBytes / 4) + c * Tr::kFilterPitch + HOLDERS + 1);
  }
  // The bar the group filters tile `tile` by (filter_stage_bars()), in the region's two padding words by the parity
  // of the group's turn (with ping-pong a group's tiles are every other one: tile / kGroups alternates): a warp may
  // stage its next turn's bars while another still reads this turn's, but not the turn after, whose staging waits
  // at the next turn's barrier for every warp of the group.
  __device__ __forceinline__ float* filter_bar(int c, int tile) const {
    return scores + c * Tr::kFilterPitch + HOLDERS + 2 + ((tile / Tr::kGroups) & 1);
  }
  // Query q0 + c's global bar: the word of its cand_key row after the segments (cand_idx holds segment 0's count
  // at that place; the select reads no key there). The diagnosis build's timelines fill cand_key from its start:
  // a bar word among them is not used (global_bar_usable()).
  __device__ __forceinline__ unsigned* global_bar(int c) const {
    return reinterpret_cast<unsigned*>(p.cand_key) + static_cast<long long>(q0 + c) * p.dense_ld +
           static_cast<long long>(gridDim.y) * p.tiles_per_split * BN;
  }
  // Query q0 + c's tile-maximum word j < k (k <= 32), and the block row's count of the first tiles that raised
  // theirs (its first query's word 1; params.cuh kFilterWords).
  __device__ __forceinline__ unsigned* tile_max_word(int c, int j) const {
    return global_bar(c) + kFilterTileWord0 + j;
  }
  __device__ __forceinline__ unsigned* tile_max_count() const { return global_bar(0) + 1; }
  __device__ __forceinline__ bool global_bar_usable(int c) const {
    if (q0 + c >= p.nq) return false;
    if constexpr (kTrace) {
      const long long timelines = static_cast<long long>(gridDim.x) * gridDim.y * 2 * kTraceSlots * 8;
      return reinterpret_cast<const unsigned char*>(global_bar(c)) -
                 reinterpret_cast<const unsigned char*>(p.cand_key) >= timelines;
    }
    return true;
  }

  // MERGE=6, a tile group's first tile: each holder of a column's accumulators offers the largest of its keys, and
  // the k-th largest of those maxima bounds the column's answer (as in bound_pass(): k holders supply k distinct
  // keys at least as large). The group raises the query's global bar to it (global_bar()), and every tile of every
  // block filters by the largest of its group's bound, the other group's (ping-pong) and the global bar as the
  // group reads them (filter_stage_bars()). Why the answer stays exact: every value a tile filters by is a bound
  // some group set. Take the bounds from the largest down. The group that set bound b filtered its first tile by
  // the largest of b and bounds it read; if that is b, it appended the k keys that back b; if it is a larger bound,
  // that one has k appended keys at least as large (by the step before), and so does b. So every bar has k appended
  // keys at least as large, and a key below a bar is beaten by them (ties included: they are at least as large, and
  // a key equal to the bar passes): no key of the answer is dropped. Fewer than k holders with a real key leave
  // -inf (no bound); the launcher takes k <= 32 with MERGE=6.
  //
  // The global bar is what makes the filter tighter at small N: a block's own first tile of 128 rows bounds a query
  // by about its top 9% (the k-th largest of 32 holders' maxima of 4 keys; ~3,900 of 50K keys appended per query at
  // 50K / 100), the largest of the 261 groups' bounds by about its top 3% (an estimate: 261 draws of that bound;
  // ~1,670 keys appended, most of them by the first tiles, which run before any bar is raised). Every block resets
  // its queries' words at its start (filter_reset_global_bars()), before it reads them, so a word never holds
  // another launch's bar; a block that starts after another raised a word only lowers it to no bar, which the
  // argument above allows.
  //
  // Tile-maximum words: the group also raises one of the query's k words to its largest key of the column: word
  // (split + group * (k / 2)) mod k, so that the launch's group-0 first tiles alone raise every word, and so do its
  // group-1 ones. Each word is then a key of its own tiles' rows, so the smallest of the k words, once all are
  // raised, has k distinct keys at least as large and bounds the answer like any bound above (a tile filters by it,
  // ties pass; a word not raised yet reads 0, no bar). Over the benchmark's Gaussian draw at 50K / 100 that bar lets
  // ~40 keys a query through where the largest bound lets ~1,550 (benchmarks/similarity_bar_model.py), but only if
  // the first tiles filter by it too, and they are most of the tiles (3 a split at 50K, 2 of them first). So with
  // ping-pong a group's first tile waits (filter_wait_words()) until half the launch's first tiles have counted
  // their raises, or kFilterWaitNs have passed: one thread of the group polls the block row's count with a
  // back-off while the rest of the group waits at its barrier, and the other group multiplies meanwhile (a lone
  // group does not wait: it would stall its block's stream). The select takes the final words as its bar
  // (select_filtered.cuh).
  //
  // Measured on the H200 at 50K / 100 (benchmarks/similarity_filtered.py --quick): 46 candidates a query against
  // 1,639 without the words, but the search alone 39.7 against 37.8 us (results/similarity_filtered_words4_h200
  // .json; without the wait 116 candidates and 39.6 us, waiting for a quarter of the first tiles 58 and 38.4): the
  // filtered search's time is not its appends. With the warp select the pair takes 46.0 us, the dense pair 41.8
  // (results/similarity_filtered_wsel2_h200.json). The first forms (8fc0e74, then dd49a2c) took 62-72 us: each
  // column read its k words one dependent load at a time (results/similarity_filtered_words2_h200.json, where a
  // single polling thread per group measured the same as every thread polling), and the word of a first tile was
  // (split * 2 + group) mod k, which the group-0 tiles the wait counts raised only the even words of.
  //
  // Where a first tile's epilogue goes (H200, 50K / 100, f906385; similarity_probe.py --variants filtered --trace,
  // the steps of trace_first(), medians over 131 blocks, results/similarity_probe_filtered_trace_steps_h200.json):
  // group 0's takes 12.8 us against the other group's 6.9 us main loop it should hide behind: holder maxima 0.5,
  // bounds 1.3, words 2.8 (the count's release waits for the group's atomics), wait 2.6, stage 2.3 (the words' L2
  // loads), pre-check 1.5, appends 1.3; a later turn's epilogue takes 2.8. So group 0's second tile starts at 24.6
  // us (the dense search's at 15.9) and the search spans 34.3 us against 22.8. Two experiment builds, measured and
  // removed: with the bars known before the first tile (f906385, TUNELAB_SIM_FILTER_PRESET: words kept from the
  // launches before on the same buffers, no bound, count or wait) the first epilogue still took 7.9 us (stage 2.6,
  // pre-check 2.1, appends 1.8), the span 29.4 us and the search alone 35.7 against the dense one's 34.0 (pair 41.2
  // against 41.7; results/similarity_filtered_preset_h200.json, similarity_probe_filtered_trace_preset_h200.json):
  // a pilot pass that found the bars first could not beat the dense search. With a first tile filtering by its
  // block's own bounds only, no L2 round trip on its epilogue (562d056, TUNELAB_SIM_FILTER_FIRST_LOCAL) the first
  // epilogue took 7.7 us and the span 30.7, but the search alone 39.5 against 39.9 us, and its 2,708 candidates a
  // query (against 48) took the select to 23.8 us: pair 60.6 against 45.9 (results/similarity_filtered_local_h200
  // .json). ncu (ncu_similarity.sh ... stalls, results/ncu_similarity_stalls_*_h200
  // .txt) puts the difference from the dense search in barrier stalls (2.18 cycles per issued instruction against
  // 0.14, on 6.7M instructions against 4.0M), then more instructions, waits and instruction-cache misses (0.60
  // against 0.15): the epilogue's steps are L2 round trips under a saturated HBM, each behind a group barrier, on
  // the MMA warps' path. What is left to try is taking the epilogue off that path (the accumulators to a shared
  // score tile, filtered by warps that do not multiply).
  __device__ __forceinline__ void filter_bound_pass(const Mma& mma, const RowTerms& rt) {
    store_holder_maxima(mma, rt, Tr::kFilterPitch);
    block_sync();
    trace_first(0);
    select_bounds(Tr::kFilterPitch, [&](int c) { return q0 + c < p.nq; },
                  [&](int c, float b) {
                    sts(filter_bound(c), b);
                    if (b > -f32_inf() && global_bar_usable(c)) global_bar_raise(global_bar(c), ordered_bits(b));
                  });
    trace_first(1);
    const int word = (static_cast<int>(blockIdx.y) + grp * (p.k >> 1)) % p.k;
    for (int c = gtid; c < BQ; c += Tr::kGroupThreads) {
      if (!global_bar_usable(c)) continue;
      float m = -f32_inf();
      for (int h = 0; h < HOLDERS; ++h) m = fmaxf(m, lds(filter_maxima(c) + h));
      if (m > -f32_inf()) global_bar_raise(tile_max_word(c, word), ordered_bits(m));
    }
    block_sync();  // every warp of the group filters by the bounds, and has raised its words
    if (gtid == 0 && global_bar_usable(0)) global_count_release_add(tile_max_count());
    trace_first(2);
  }
  // A group's first tile, with ping-pong: one thread waits until the launch's first tiles that counted their raises
  // reach kFilterWaitPct percent, or kFilterWaitNs have passed, reading the count every kFilterPollNs or so; the
  // group waits for it at its barrier.
  static constexpr unsigned long long kFilterWaitNs = TUNELAB_SIM_FILTER_WAIT_NS;
  static constexpr unsigned kFilterWaitPct = TUNELAB_SIM_FILTER_WAIT_PCT;
  static constexpr unsigned kFilterPollNs = TUNELAB_SIM_FILTER_POLL_NS;
  __device__ __forceinline__ void filter_wait_words() const {
    if (gtid == 0 && global_bar_usable(0)) {
      const unsigned need = (gridDim.y * Tr::kGroups * kFilterWaitPct + 99u) / 100u;
      const unsigned long long t0 = spin_clock_ns();
      while (global_count_acquire(tile_max_count()) < need && spin_clock_ns() - t0 < kFilterWaitNs)
        spin_pause_ns(kFilterPollNs);
    }
    block_sync();
  }
  // Query q0 + c's bar from L2 (MERGE 6, 7): the larger of its global bar and the smallest of its k tile-maximum
  // words (-inf while one is not raised: it reads 0). words_issue() issues the loads (the global bar and words 0..15
  // at once: one round trip), words_bar() waits for them, and loads words 16..31 when k > 16 (a second round trip:
  // with all 32 in flight MERGE=7's filter warps spilled). One load and its use at a time, 10 dependent reads of L2
  // a column and tile, took the 50K / 100 search from 38 to 72 us on the H200 (results/similarity_filtered_words2_
  // h200.json). A column past nq (or a trace build's word among the stamps: global_bar_usable()) has no bar: -inf.
  static constexpr int kWordLoads = 4;  // uint4 loads in flight a column: words 0..15
  struct WordLoads {
    unsigned g;
    uint4 v[kWordLoads];
  };
  __device__ __forceinline__ WordLoads words_issue(int c) const {
    WordLoads l;
    l.g = 0u;
#pragma unroll
    for (int i = 0; i < kWordLoads; ++i) l.v[i].x = l.v[i].y = l.v[i].z = l.v[i].w = ~0u;
    if (!global_bar_usable(c)) return l;
    l.g = global_bar_load(global_bar(c));
#pragma unroll
    for (int i = 0; i < kWordLoads; ++i)
      if (4 * i < p.k) l.v[i] = global_words_load4(tile_max_word(c, 4 * i));
    return l;
  }
  __device__ __forceinline__ float words_bar(int c, const WordLoads& l) const {
    if (!global_bar_usable(c)) return -f32_inf();
    unsigned m = 0xffffffffu;
    auto fold = [&](const uint4& v, int w0) {
      const unsigned w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
      for (int e = 0; e < 4; ++e)
        if (w0 + e < p.k) m = w[e] < m ? w[e] : m;
    };
#pragma unroll
    for (int i = 0; i < kWordLoads; ++i) fold(l.v[i], 4 * i);
    if (p.k > 4 * kWordLoads) {
      uint4 v[kSelectMaxK / 4 - kWordLoads];
#pragma unroll
      for (int i = 0; i < kSelectMaxK / 4 - kWordLoads; ++i)
        if (4 * (kWordLoads + i) < p.k) v[i] = global_words_load4(tile_max_word(c, 4 * (kWordLoads + i)));
#pragma unroll
      for (int i = 0; i < kSelectMaxK / 4 - kWordLoads; ++i)
        if (4 * (kWordLoads + i) < p.k) fold(v[i], 4 * (kWordLoads + i));
    }
    return fmaxf(ordered_float(l.g), ordered_float(m));
  }
  // MERGE 6, 7, at the block's start (columns first, first + stride, ..., before the barrier or thread that reads
  // them): no global bar yet for the block's queries.
  __device__ __forceinline__ void filter_reset_global_bars(int first, int stride) const {
    for (int c = first; c < BQ; c += stride)
      if (global_bar_usable(c))
        for (int w = 0; w < kFilterTileWord0 + p.k; w += 4) global_words_reset4(global_bar(c) + w);
  }
  // MERGE 6, 7's candidate rows: where query q's segment of this block's split starts, and one appended key.
  __device__ __forceinline__ long long segment_start(int q) const {
    return static_cast<long long>(q) * p.dense_ld + static_cast<long long>(blockIdx.y) * p.tiles_per_split * BN;
  }
  __device__ __forceinline__ void put_candidate(long long at, float key, int idx) const {
    if constexpr (!kTrace) p.cand_key[at] = key;  // (trace: its stamps)
    p.cand_idx[at] = idx;
  }
  // MERGE=6, every tile: the bar of each query column for this tile, the largest of the group's bound, the other
  // group's (ping-pong: as this group reads it, -inf until that group sets it) and the query's global bar, one
  // thread per column; one load of L2 per column instead of one per holder of it. Each thread reading its columns'
  // global bars at the end of its previous tile instead (no load or barrier here) measured worse on an H100 at
  // 50K / 100 (results/similarity_filtered_h100_gbar_prefetch.json against similarity_filtered_h100_gbar.json):
  // those bars are older, 3,195 candidates a query against 1,668, and the pair took 57.7 against 53.9 us. With the
  // tile-maximum words a ping-pong group's later turns stage their bars before their main loops (the words are
  // raised by then; the search loop calls this there), and only first tiles here, after their bound pass.
  __device__ __forceinline__ void filter_stage_bars(int tile, bool first) {
    if constexpr (Tr::kGroups == 2 && kFilterWaitNs > 0)
      if (first) filter_wait_words();
    if (first) trace_first(3);
    for (int c = gtid; c < BQ; c += Tr::kGroupThreads) {
      float bar = lds(filter_bound(c));
      if constexpr (Tr::kGroups == 2) bar = fmaxf(bar, lds(filter_other_bound(c)));
      sts(filter_bar(c, tile), fmaxf(bar, words_bar(c, words_issue(c))));
    }
    block_sync();
    if (first) trace_first(4);
  }

  // MERGE=6: every key of the tile that reaches its column's bar (filter_stage_bars()) is appended with its row to
  // the split's segment of the query's candidate row (params.cuh topk_candidate_rows()): each thread counts its passing
  // keys per column and takes their places with one shared atomic on the block's count, then stores them there. One
  // group barrier (the staged bars), no warp collective, no global atomic, no branch between columns: keys of rows
  // past n and NaN keys never pass, padding query columns have no row. Measured forms, at nq = 100 on an H100
  // (similarity_probe.py --variants filtered --trace, ncu's source counters), all with bars in global memory that
  // every group's first-tile bound raised by atomic max, and a global atomic per column and tile reserving the
  // group's slots in one row per query: the 8 holders of a column in a warp summing their keys by shuffles in
  // every column took 20-22 us for a group's first tile and 13 for later ones (the dense search's stores take well
  // under 1); keys staged in shared memory and copied out by one thread per column 16 and 8, with 15% of the warps'
  // stall samples on instruction-cache misses in its unrolled code; one shared atomic per thread and column, one
  // global one per column and shuffle-selected bounds 14.9 and 6.1. This form with block-local bars only
  // (segments, bounds selected per thread): 5.6 and 3.3; with the 8 holders of a column in a warp scanning their
  // counts by shuffles and one of them taking the atomic (8 lanes' atomics on one word are no slower than that): 9.0
  // and 5.9. With the global bars staged (filter_stage_bars()): 7.9 and 4.1
  // (results/similarity_probe_filtered_trace_gbar_h100.json), but 2.3x fewer candidates for the select.
  __device__ __forceinline__ void filter_epilogue(const Mma& mma, int tile, bool first) {
    const int g = lane >> 2, t = lane & 3;
    const RowTerms rt = row_terms(tile);
    if (first) filter_bound_pass(mma, rt);
    if (first || !Tr::kPingPong) filter_stage_bars(tile, first);  // (a ping-pong group's later turns: staged already)
    constexpr int KEYS = 2 * MT;  // a thread's keys of one column
    unsigned bits[(NT * 2 * KEYS + 31) / 32];
#pragma unroll
    for (int w = 0; w < (NT * 2 * KEYS + 31) / 32; ++w) bits[w] = 0u;
    int at[NT][2];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int col = query_col(nt, e, t);
        const bool live = q0 + col < p.nq;
        const float bar = lds(filter_bar(col, tile));
        int cnt = 0;
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int b = (nt * 2 + e) * KEYS + 2 * mt + h;
            const bool pass = live && rt.valid[mt][h] && key_raw(mma, rt, mt, nt, h, e) >= bar;
            bits[b / 32] |= static_cast<unsigned>(pass) << (b % 32);
            cnt += pass;
          }
        }
        at[nt][e] = cnt > 0 ? atomic_add_shared(filter_count(col), cnt) : 0;
      }
    }
    trace_turn_event(2);  // (the diagnosis build: the tile's keys are counted)
    const int id0 = static_cast<int>(p.index_base) + tile * BN;
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int col = query_col(nt, e, t);
        const int q = q0 + col < p.nq ? q0 + col : 0;  // (a padding column has no passing key)
        long long at_row = segment_start(q) + at[nt][e];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int b = (nt * 2 + e) * KEYS + 2 * mt + h;
            if ((bits[b / 32] >> (b % 32)) & 1u)
              put_candidate(at_row++, key_raw(mma, rt, mt, nt, h, e), id0 + row_of(mt, h, g));
          }
        }
      }
    }
  }

  // MERGE 6, 7, after the block's last tile (columns first, first + stride, ..., once their counts are final): each
  // query column's count of appended keys (MERGE=6: group 0's region; 7: the filter warps' words) to the row's
  // cand_idx after the segments (params.cuh topk_filter_ld()).
  __device__ __forceinline__ void filter_write_counts(int first, int stride) const {
    const long long at = static_cast<long long>(gridDim.y) * p.tiles_per_split * BN + blockIdx.y;
    for (int c = first; c < BQ; c += stride) {
      if (q0 + c >= p.nq) continue;
      int n;
      if constexpr (Tr::kFilterWarps) n = lds(fw_count(c));
      else n = lds(filter_count(c));
      p.cand_idx[static_cast<long long>(q0 + c) * p.dense_ld + at] = n;
    }
  }

  // MERGE=7 (filter warps; params.cuh topk_filter_warps()). The filtered epilogue above costs a first tile 12.8 us
  // of L2 round trips behind group barriers on the MMA warps' path (its comment). Here the MMA warps only copy each
  // tile's keys (metric applied; NaN for rows past n) to one shared score tile, [BQ][FP] floats, and go on with
  // their next tile; warps 1..3 of the producer warpgroup, which do not multiply, take the tile from there: its
  // bounds and words, the bars' loads of L2, the appends. Mbarriers hand the tile over: full
  // (every thread of the dumping tile group arrives after its stores) and empty[m & 1] (every filter thread arrives
  // after its reads of the block's m-th tile). The m-th tile is the m-th completion of full, and its dump waits for
  // the filter to be done with tile m - 1, completion (m - 1) / 2 of empty[(m - 1) & 1], so the tiles pass in order
  // whichever group dumps them. Two empty barriers, because a parity wait tells only whether the barrier's phase is
  // one or two ahead: with ping-pong, group 0 may reach tile 2's dump while the filter still holds tile 0 (its
  // first form waited there for the other blocks' words), and one barrier's wait for its completion 1 would pass at
  // phase 0 (the CPU emulator's deadlock check caught it). A group's previous dump waited on the same barrier for
  // the completion before, so its wait is exact.
  //
  // The filter warps, per tile (a thread per query column, c = ftid, ftid + 96):
  //   1. First tile, every column: the k-th largest of its 32 row groups' maxima bounds it (k groups supply k
  //      distinct keys at least as large, as in filter_bound_pass()); it is the block's bound and raises the
  //      query's global bar, and the tile's 4 largest row-group maxima raise tile-maximum words (split + i) mod k
  //      (fw_first_bound()), so that each word is a key of its own rows and the smallest of the k words, once all
  //      are raised, bounds the answer too (filter_bound_pass() says why the answer stays exact with these bars,
  //      ties included).
  //   2. First tile: the column's keys at least its bound are held in shared memory and the tile is released at
  //      once (fw_hold()); then its bar is staged, the largest of the block's bound, the global bar and the
  //      smallest word (filter_stage_bars()'s loads, one round trip a column), and the held keys that reach it are
  //      appended. Unlike MERGE=6's, the filter warps do not wait for the other blocks' words: waiting (when the
  //      first tile's own keys waited for the bars) did not lower the candidates (86 a query either way) and the
  //      search took 49.6 us with it, 48.0 without (an H100, results/similarity_filtered_warps4_h100.json).
  //   3. Later tiles: every key of a column at least its bar (NaN never passes) goes to the split's segment of the
  //      query's candidate row with its index, after the column's count (the owning thread's), and the tile is
  //      released. If another follows, each column's bar for it is staged during the column's scan (its loads in
  //      flight meanwhile), so that no filter waits for a load of L2.
  // At the end the counts go to the rows (as filter_write_counts()). The filtered select reads the rows, the global
  // bar and the words as after MERGE=6.
  static constexpr int FP = topk_filter_tile_pitch(BN);
  static constexpr int FR = BN / 32;  // keys of a column per filter lane
  static constexpr int FT = 32 * kFilterWarpCount;
  __device__ __forceinline__ float* fw_tile() const { return reinterpret_cast<float*>(smem + Tr::kScoreOffset); }
  // column c's words: its staged bar, the block's bound, the block's count, the first tile's held keys
  __device__ __forceinline__ float* fw_word(int c, int w) const { return fw_tile() + BQ * FP + 4 * c + w; }
  __device__ __forceinline__ float* fw_bar(int c) const { return fw_word(c, 0); }
  __device__ __forceinline__ float* fw_bound(int c) const { return fw_word(c, 1); }
  __device__ __forceinline__ int* fw_count(int c) const { return reinterpret_cast<int*>(fw_word(c, 2)); }
  __device__ __forceinline__ int* fw_held_n(int c) const { return reinterpret_cast<int*>(fw_word(c, 3)); }
  static constexpr int HP = kFilterHeld + 1;  // the held keys' pitch
  __device__ __forceinline__ float* fw_held_key(int c) const { return fw_tile() + BQ * FP + 4 * BQ + 8 + c * HP; }
  __device__ __forceinline__ int* fw_held_idx(int c) const {
    return reinterpret_cast<int*>(fw_tile() + BQ * FP + 4 * BQ + 8 + BQ * HP + c * HP);
  }
  __device__ __forceinline__ unsigned fw_full_bar() const {
    return smem_u32(smem) + static_cast<unsigned>(Tr::kScoreOffset + BQ * FP * 4 + BQ * 16);
  }
  __device__ __forceinline__ unsigned fw_empty_bar(int m) const { return fw_full_bar() + 8u + 8u * (m & 1); }
  __device__ __forceinline__ void fw_sync() const { mbar::named_sync(4, FT); }

  // The MMA warps' side: the block's m-th tile's keys to the score tile, once the filter warps are done with the
  // tile before it.
  __device__ __forceinline__ void dump_epilogue(const Mma& mma, int tile, int m) {
    const int g = lane >> 2, t = lane & 3;
    if (m > 0) mbar::wait(fw_empty_bar(m - 1), ((m - 1) >> 1) & 1);
    const RowTerms rt = row_terms(tile);
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        float* dst = fw_tile() + query_col(nt, e, t) * FP;
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
          for (int h = 0; h < 2; ++h)
            sts(dst + row_of(mt, h, g), rt.valid[mt][h] ? key_raw(mma, rt, mt, nt, h, e) : f32_nan());
      }
    }
    mbar::arrive(fw_full_bar());
  }

  // The filter warps work a thread per query column, as MERGE=6's lane bounds do (c = ftid, ftid + 96): the
  // column's keys are a stretch of the score tile, which a thread reads FR rows at a time (the lanes' stretches
  // are FP = 4 mod 32 words apart: conflict-free 16-byte loads), and its count stays its own. The first form, a
  // warp per column (its lanes FR rows each; bounds by shuffles, places by ballots, one lane's atomics at a time),
  // was latency-bound: ~16 us a tile on the H200, the search 90.6 us against the dense 33.7
  // (results/similarity_filtered_warps_h200.json); 4 columns at a time, 54.2 against 45.3 on an H100, the first
  // tile's bounds alone ~8 us (results/similarity_filtered_warps3_h100.json, similarity_probe_filtered_trace_
  // warps_trace3_h100.json).
  __device__ __forceinline__ bool fw_live(int c) const { return c < BQ && q0 + c < p.nq; }
  // Rows j * FR .. j * FR + FR - 1 of column c (j < 32).
  __device__ __forceinline__ void fw_rows(int c, int j, float (&x)[FR]) const {
    const float* src = fw_tile() + c * FP + j * FR;
    if constexpr (FR % 4 == 0) {
#pragma unroll
      for (int i = 0; i < FR; i += 4) {
        const float4 v = lds4(src + i);
        x[i] = v.x;
        x[i + 1] = v.y;
        x[i + 2] = v.z;
        x[i + 3] = v.w;
      }
    } else {
#pragma unroll
      for (int i = 0; i < FR; i += 2) {
        const float2 v = *reinterpret_cast<const float2*>(src + i);
        x[i] = v.x;
        x[i + 1] = v.y;
      }
    }
  }
  // Step 1 for column c (a first tile): the k-th largest of the 32 row groups' maxima bounds the column (k groups
  // supply k distinct keys at least as large); it is the block's bound and raises the query's global bar. The
  // FW_RAISES largest group maxima (keys of distinct rows) raise tile-maximum words (split + i) mod k, i = 0, 1, ..:
  // a tile puts at most one key in a word, so the k words still hold keys of k distinct rows, and each word takes
  // the best of more keys than MERGE=6's one a first tile. Measured on an H100 at 50K / 100: 76 candidates a query
  // against 86 with one raise a tile, the pair 51.6 us either way (results/similarity_filtered_raises4_h100.json,
  // similarity_filtered_final7_h100.json).
  // One warp instruction raises 32 columns' words (one lane's atomics at a time, ~1 us a batch of 4 columns under
  // the corpus stream on an H100, took the first tile's raises to 12.5 us:
  // results/similarity_probe_filtered_trace_warps_trace_h100.json).
  static constexpr int FW_RAISES = 4;
  __device__ __forceinline__ void fw_first_bound(int c) const {
    const bool low = p.k > 16;
    const float s = low ? -1.f : 1.f;
    float v[16], w[16], top[FW_RAISES];
#pragma unroll
    for (int i = 0; i < FW_RAISES; ++i) top[i] = -f32_inf();
#pragma unroll
    for (int j = 0; j < 32; ++j) {
      float x[FR];
      fw_rows(c, j, x);
      float m = -f32_inf();
#pragma unroll
      for (int r = 0; r < FR; ++r) m = fmaxf(m, x[r]);  // (fmaxf drops NaN: rows past n, NaN keys)
      if (j < 16) v[j] = s * m;
      else w[j - 16] = s * m;
#pragma unroll
      for (int i = 0; i < FW_RAISES; ++i) {  // m into the descending top[] (one key a group: distinct rows)
        const float hi = fmaxf(top[i], m);
        m = fminf(top[i], m);
        top[i] = hi;
      }
    }
    const float b = lane_kth_largest_of_32_core(v, w, s, low ? 33 - p.k : p.k);
    sts(fw_bound(c), b);
    if (global_bar_usable(c)) {
      if (b > -f32_inf()) global_bar_raise(global_bar(c), ordered_bits(b));
#pragma unroll
      for (int i = 0; i < FW_RAISES; ++i)
        if (i < p.k && top[i] > -f32_inf())
          global_bar_raise(tile_max_word(c, (static_cast<int>(blockIdx.y) + i) % p.k), ordered_bits(top[i]));
    }
  }
  // Steps 2 and 4, a column's bar for its next filter: the larger of the block's bound and the query's bar from L2
  // (words_issue() issues its loads, fw_bar_take() waits for them). A thread stages its columns' bars itself, so no
  // barrier orders them.
  __device__ __forceinline__ void fw_bar_take(int c, const WordLoads& l) const {
    sts(fw_bar(c), fmaxf(lds(fw_bound(c)), words_bar(c, l)));
  }
  // A scan of column c (every lane of the warp: a column past BQ or nq has live = false and reads nothing): each key
  // at least `bar` (NaN never passes) goes to emit(key, its row in the tile), in row order. KC row groups (up to 32
  // rows) are loaded at once and their passes kept as a bit mask; the warp skips a chunk no lane's key passes, and a
  // lane emits its passes one set bit at a time (the key reread from the tile). One group at a time, each load's
  // latency and a vote a group, took the first tile's scan of two columns to 12.8 us on an H100 (results/
  // similarity_probe_filtered_trace_warps_trace6_h100.json), and 8 groups at once with an emit path through every
  // key (its count a chain through all 32) 10.2 (..._warps_trace7_h100.json).
  static constexpr int KC = 32 / FR > 0 ? 32 / FR : 1;
  template <class Emit>
  __device__ __forceinline__ void fw_scan(int c, bool live, float bar, Emit emit) const {
    const float* col = fw_tile() + c * FP;
#pragma unroll 1
    for (int j0 = 0; j0 < 32; j0 += KC) {
      float x[KC][FR];
#pragma unroll
      for (int jj = 0; jj < KC; ++jj) {
        if (live && j0 + jj < 32) {
          fw_rows(c, j0 + jj, x[jj]);
        } else {  // (NaN: passes no bar, -inf included)
#pragma unroll
          for (int r = 0; r < FR; ++r) x[jj][r] = f32_nan();
        }
      }
      unsigned mask = 0u;
#pragma unroll
      for (int jj = 0; jj < KC; ++jj)
#pragma unroll
        for (int r = 0; r < FR; ++r) mask |= static_cast<unsigned>(x[jj][r] >= bar) << (jj * FR + r);
      if (!__any_sync(0xffffffffu, mask != 0u)) continue;
      while (mask != 0u) {
        const int row = j0 * FR + lowest_set_bit(mask);
        mask &= mask - 1u;
        emit(lds(col + row), row);
      }
    }
  }
  // Step 3 for column c: the keys at least `bar` (its staged bar) to the split's segment, after the column's count
  // (fw_scan()). Every lane of the warp calls it (a column past BQ or nq: live = false, nothing read or written).
  // With `next`, the column's bar for the next tile is staged meanwhile (its loads are in flight during the scan).
  __device__ __forceinline__ void fw_append(int c, int tile, bool live, bool next, float bar) const {
    int n = live ? lds(fw_count(c)) : 0;
    WordLoads l;
    if (next && live) l = words_issue(c);
    const long long row = segment_start(q0 + c);
    const int id0 = static_cast<int>(p.index_base) + tile * BN;
    fw_scan(c, live, bar, [&](float key, int r) { put_candidate(row + n++, key, id0 + r); });
    if (live) sts(fw_count(c), n);
    if (next && live) fw_bar_take(c, l);
  }

  // The first tile, a column's keys at least its own bound (k-th largest of its row groups' maxima: ~1 in 10 of a
  // 128-row tile) are held in shared memory (kFilterHeld a column), and the tile is released at once: its bar would
  // need the other blocks' words, one round trip of L2 that takes ~4 us under the corpus stream (an H100: results/
  // similarity_probe_filtered_trace_warps_trace5_h100.json), and filtering by the block's own bound would append
  // ~2,700 keys a query (MERGE=6's FIRST_LOCAL experiment, topk.cuh filter_bound_pass()). fw_release_held() then
  // appends those of them that reach the staged bar while the MMA warps multiply the next tiles. A column with more
  // keys at its bound than it holds (ties, or fewer than k real keys: no bound) appends them all at once instead.
  __device__ __forceinline__ void fw_hold(int c, int tile, bool live) const {
    const float bar = live ? lds(fw_bound(c)) : f32_inf();
    const int id0 = static_cast<int>(p.index_base) + tile * BN;
    int n = 0;
    fw_scan(c, live, bar, [&](float key, int r) {
      if (n < kFilterHeld) {
        sts(fw_held_key(c) + n, key);
        sts(fw_held_idx(c) + n, id0 + r);
      }
      ++n;
    });
    const bool over = n > kFilterHeld;
    if (live) sts(fw_held_n(c), over ? 0 : n);
    if (__any_sync(0xffffffffu, over)) fw_append(c, tile, live && over, false, bar);  // (warp-uniform)
  }
  // The first tile's held keys of column c that reach its staged bar (fw_bar_take()) to the split's segment.
  __device__ __forceinline__ void fw_release_held(int c, int tile) const {
    const float bar = lds(fw_bar(c));
    const int held = lds(fw_held_n(c));
    int n = lds(fw_count(c));
    const long long row = segment_start(q0 + c);
    for (int e = 0; e < held; ++e) {
      const float key = lds(fw_held_key(c) + e);
      if (key >= bar) put_candidate(row + n++, key, lds(fw_held_idx(c) + e));
    }
    sts(fw_count(c), n);
  }

  // The diagnosis build's steps of the filter warps' first tile (thread 0's), in group 0's first-tile slots
  // (kTraceFirst0 + {0: the bounds and words are raised, 1: the keys are held and the tile released, 2: the bars
  // are staged and the held keys appended}; the MMA warps' turns keep their own slots).
  __device__ __forceinline__ void fw_trace(int ftid, int step) const {
    if (kTrace && ftid == 0) trace(kTraceFirst0 + step);
  }
  // The filter warps' side (warps kWarps + 1 .. kWarps + 3), for the block's ntiles tiles from tile_begin.
  __device__ __forceinline__ void filter_warps_run(int tile_begin, int ntiles) {
    const int ftid = tid - 32 * (Tr::kWarps + 1);
    static_assert(BQ <= 2 * FT, "MERGE=7: at most two query columns a filter thread");
    const int c0 = ftid;  // this thread's columns: c0, c0 + FT
    for (int c = ftid; c < BQ; c += FT) {
      sts(fw_bar(c), -f32_inf());
      sts(fw_bound(c), -f32_inf());
      sts(fw_count(c), 0);
    }
    filter_reset_global_bars(ftid, FT);
    for (int m = 0; m < ntiles; ++m) {
      const int tile = tile_begin + m;
      mbar::wait(fw_full_bar(), m & 1);
      if (m == 0) {  // (see fw_hold())
#pragma unroll 1
        for (int c = c0; c < BQ; c += FT)
          if (fw_live(c)) fw_first_bound(c);
        fw_trace(ftid, 0);
#pragma unroll 1
        for (int c = c0; __any_sync(0xffffffffu, c < BQ); c += FT) fw_hold(c, tile, fw_live(c));  // (warp-uniform)
        mbar::arrive(fw_empty_bar(0));  // this thread's reads of the tile are done
        fw_trace(ftid, 1);
#pragma unroll 1
        for (int c = c0; c < BQ; c += FT)
          if (fw_live(c)) {
            fw_bar_take(c, words_issue(c));
            fw_release_held(c, tile);
          }
        fw_trace(ftid, 2);
        continue;
      }
      const bool next = m + 1 < ntiles;
#pragma unroll 1
      for (int c = c0; __any_sync(0xffffffffu, c < BQ); c += FT)  // (warp-uniform)
        fw_append(c, tile, fw_live(c), next, fw_live(c) ? lds(fw_bar(c)) : 0.f);
      mbar::arrive(fw_empty_bar(m));  // this thread's reads of the tile are done
    }
    filter_write_counts(ftid, FT);  // (each column's count is its own thread's)
    if constexpr (kTrace) {
      fw_sync();  // (the block's end: every filter thread's)
      if (ftid == 0) trace(kTraceDone);
    }
  }

  // Dot products -> score tile rows of pass `pass` (and, for cosine / l2, the rows' squared norms -> norms[]);
  // then each warp turns its columns into keys (metric applied) and offers them to their running lists. `first`:
  // the tile group's first tile of the split (thread lists and MERGE=6 run their bound pass on it).
  __device__ __forceinline__ void epilogue(Mma& mma, int tile, bool first) {
    const int g = lane >> 2, t = lane & 3;
    const int row0 = tile * BN;
    // MMA 0 and 1 pass block barriers in every main-loop slice, so the previous tile's epilogue is over everywhere
    // when this one starts. MMA 2 and 3's main loops have none: wait here until no thread of the tile group still
    // reads the previous tile's norms, scores or queues, or clears hit flags or queue counts after this tile's
    // pre-check set them.
    // (MERGE=5 shares nothing in shared memory across tiles but the row norms of cosine and l2.)
    // (MERGE=6 shares its bounds, which each group writes once, on its first tile, and the block's counts, which
    // take shared atomics.)
    if constexpr (Tr::kTmaProducer && (!Tr::kNoLists || Tr::kNorms)) block_sync();
    if constexpr (Tr::kNorms) {
      if (warp_q == 0) {  // these warps cover every row of the tile once
        mma.quad_reduce_norms();
        if (t == 0) {
#pragma unroll
          for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int h = 0; h < 2; ++h) sts(norms + row_of(mt, h, g), mma.nrm[mt][h]);
        }
      }
      block_sync();  // every warp needs its rows' norms for the pre-check
    }
    if constexpr (Tr::kDense) {
      dense_epilogue(mma, tile);
      return;
    }
    if constexpr (Tr::kFiltered) {
      filter_epilogue(mma, tile, first);
      return;
    }
    if constexpr (Tr::kFilterWarps) {
      dump_epilogue(mma, tile, tile - static_cast<int>(blockIdx.y) * p.tiles_per_split);
      return;
    }
    if constexpr (Tr::kThreadLists) {
      queue_epilogue(mma, tile, first);
      return;
    }
    // Pre-check (shared lists): does any key of this tile beat its query's current k-th entry? Each thread tests its
    // own accumulators with exactly the arithmetic consume() sees (same key, same order), so when nothing passes
    // here nothing would pass there either, and the whole epilogue is skipped - the common case once the
    // lists are full (a key enters with probability ~k / rows seen). A list that is not full has the
    // threshold (-inf, INT_MAX), which every valid key passes, so the full path runs.
    bool any = false;
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int col = query_col(nt, e, t);
        const bool live = q0 + col < p.nq;  // padding columns have no list (their meta exists: BQ entries)
        float tk;
        int ti;
        column_bar(col, tk, ti);
        bool hit = false;
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int row = row_of(mt, h, g);
            const float key = metric_key(mma.acc[mt][nt][2 * h + e], metric_term(row));
            const int id = static_cast<int>(p.index_base + row0 + row);
            hit = hit || (live && row0 + row < p.n && better(key, id, tk, ti));
          }
        }
        // the 8 lanes with this t hold this column's rows of the warp: one of them records the hit
        const bool col_hit = (ballot(hit) & (0x11111111u << t)) != 0;
        if (g == 0 && col_hit) sts(hits + warp_n * BQ + col, 1);
        any = any || hit;
      }
    }
    if (!block_sync_or(any)) return;
#pragma unroll
    for (int pass = 0; pass < Tr::kEpiPasses; ++pass) {
      store_scores(mma, tile, pass);
      block_sync();
      // the rows are the same for every column: load their norms once per pass
      float scale[R], shift[R];
#pragma unroll
      for (int r = 0; r < R; ++r) {
        scale[r] = 1.f;
        shift[r] = 0.f;
        if constexpr (Tr::kMetric == kCosine) {
          scale[r] = rsqrtf(fmaxf(lds(norms + pass * EPI + lane + 32 * r), 1e-24f));  // 1 / max(|c|, 1e-12)
        } else if constexpr (Tr::kMetric == kL2) {
          scale[r] = 2.f;
          shift[r] = -lds(norms + pass * EPI + lane + 32 * r);
        }
      }
      const int id0 = static_cast<int>(p.index_base + row0 + pass * EPI);
      for (int c = warp; c < BQ; c += Tr::kWarps) {
        if (q0 + c >= p.nq) break;
        // A column no warp row flagged is skipped: the pre-check used consume()'s arithmetic and this column's
        // threshold, which only its own consume() raises, so consume() would insert nothing. The owning warp is
        // the only reader of its column's flags and clears them after the last pass (the next tile's pre-check
        // comes after a block barrier of the main loop, or with MMA 2, 3 the one that opens the next epilogue).
        int hit = 0;
#pragma unroll
        for (int wn = 0; wn < Tr::kWarpsN; ++wn) hit |= lds(hits + wn * BQ + c);
        if (pass + 1 == Tr::kEpiPasses) {
          syncwarp();
          if (lane < Tr::kWarpsN) sts(hits + lane * BQ + c, 0);
        }
        if (!hit) continue;
        float v[R];
        int id[R];
#pragma unroll
        for (int r = 0; r < R; ++r) {
          const float dot = lds(scores + c * SP + lane + 32 * r);
          v[r] = dot;  // NaN (invalid row) stays NaN
          if constexpr (Tr::kMetric == kCosine) v[r] = dot * scale[r];
          if constexpr (Tr::kMetric == kL2) v[r] = fmaf(scale[r], dot, shift[r]);
          id[r] = id0 + lane + 32 * r;
        }
        consume<R, Tr::kMerge>(list_of(c), v, id, p.k, skey, sidx, lane);
      }
      // the next pass overwrites the score tile; the next tile's main loop (MMA 2, 3: its next epilogue) has barriers
      if (pass + 1 < Tr::kEpiPasses) block_sync();
    }
  }

  // Start of main-loop iteration `it` (flattened tile x slice): waits until slice `it` has landed for every
  // thread, refills the stage freed for slice it + kPrefetch (ld_tile / ld_kc: the next slice to load) and
  // returns slice it's stage address. The stage refilled is free for every warp after the barrier: mma.sync
  // read it in the previous iteration; wgmma two iterations ago, and each warp waited for that MMA group in
  // the previous iteration (wait<1>).
  __device__ __forceinline__ unsigned begin_slice(int it, int total, int& ld_tile, int& ld_kc) {
    cp_async_wait<Tr::kPrefetch - 1>();
    // wgmma reads shared memory through the async proxy: make this thread's cp.async data visible to it
    if constexpr (Tr::kWgmma) wg::fence_proxy_async();
    __syncthreads();
    const int ld_it = it + Tr::kPrefetch;
    if (ld_it < total) {
      load(ld_it % Tr::kStages, ld_tile, ld_kc);
      if (++ld_kc == KT) {
        ld_kc = 0;
        ++ld_tile;
      }
    }
    cp_async_commit();
    return stage_addr(it % Tr::kStages);
  }

  // Issues the wgmma group of one slice (stage at a_tile: the corpus rows, then the query rows) and, for cosine /
  // l2, accumulates the rows' squared norms from the same stage while the MMAs run.
  __device__ __forceinline__ void wgmma_slice(Mma& mma, unsigned a_tile, const LdsmLaneAddr<L, 1>& la) {
    const unsigned b_tile = a_tile + Tr::kATileBytes;
    // this warpgroup's m64 blocks: rows wg_row0 + mt * 64 of the A tile, 128 bytes per row
    const unsigned a_wg = a_tile + static_cast<unsigned>(wg_row0 * 128);
    wg::fence_operands(mma.acc);
    wg::wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < Tr::kKSteps; ++ks) {
      const unsigned long long db = wg::desc_k_sw128(b_tile + 32u * ks);
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        const unsigned long long da = wg::desc_k_sw128(a_wg + static_cast<unsigned>(mt * 64 * 128) + 32u * ks);
        if constexpr (Tr::kDtype == kF16) wg::wgmma_m64k16_f16(mma.acc[mt], da, db);
        else wg::wgmma_m64k16_bf16(mma.acc[mt], da, db);
      }
    }
    wg::commit();
    if constexpr (Tr::kNorms) {
      const LdsmLaneAddr<L, 1> la_i = la.opaque();
#pragma unroll
      for (int ks = 0; ks < Tr::kKSteps; ++ks)
        mma.template norms_kstep<LdsmLaneAddr<L, 1>, 64>(a_tile, la_i, row_base, ks);
    }
  }

  // MMA 2, 3: the producer warpgroup's first lane walks the split's slices (tiles, then slices of d) and TMA-copies
  // the corpus and query boxes of each into its stage once the MMA warps have released it. Boxes past n, nq or d
  // are zeros. With clusters its query box is its part of the slice, multicast to every block of the cluster, and
  // tiles past num_tiles get no corpus copy (their rows are masked; the stage's old bytes are never a key). With
  // PREFETCH, the first slice of each tile first asks L2 for all slices of the tile PREFETCH ahead (up to tile_end).
  // Every slice copies its query box again from L2: with them copied on the ring's first lap only (fefcd8a's probe,
  // wrong keys) the dense search at 50K / 100 took 33.5 us against 33.6 on the H200, 27.2 against 27.2 without its
  // key stores, so a query tile resident in shared memory would gain nothing (benchmarks/SIMILARITY.md, "Where the
  // stores' time goes").
  __device__ __forceinline__ void produce(int tile_begin, int tile_end, int total) {
    if (lane != 0) return;
    const tma::Desc* dc = reinterpret_cast<const tma::Desc*>(p.tma_corpus);
    const tma::Desc* dq = reinterpret_cast<const tma::Desc*>(p.tma_queries);
    tma::prefetch(dc);
    tma::prefetch(dq);
    const unsigned long long read_once = tma::policy_evict_first(), reread = tma::policy_evict_last();
    int tile = tile_begin, kc = 0;
    for (int it = 0; it < total; ++it) {
      const int s = it % Tr::kStages;
      if (it >= Tr::kStages) mbar::wait(empty_bar(s), ((it / Tr::kStages) - 1) & 1);
      const unsigned a = stage_addr(s);
      if constexpr (Tr::kPrefetchTiles > 0) {
        const int ahead = tile + Tr::kPrefetchTiles;
        if (kc == 0 && ahead < tile_end && ahead < p.num_tiles) {
          for (int j = 0; j < KT; ++j) tma::prefetch_2d(dc, j * BK, ahead * BN);
        }
      }
      if constexpr (Tr::kCluster == 1) {
        mbar::arrive_expect_tx(full_bar(s), Tr::kStageBytes);
        tma::load_2d(a, dc, full_bar(s), kc * BK, tile * BN, read_once);
        tma::load_2d(a + Tr::kATileBytes, dq, full_bar(s), kc * BK, q0, reread);
      } else {
        const bool corpus = tile < p.num_tiles;
        mbar::arrive_expect_tx(full_bar(s), corpus ? Tr::kStageBytes : Tr::kBTileBytes);
        if (corpus) tma::load_2d(a, dc, full_bar(s), kc * BK, tile * BN, read_once);
        const int part = static_cast<int>(crank) * Tr::kQueryPartRows;
        tma::load_2d_multicast(a + Tr::kATileBytes + static_cast<unsigned>(part * Tr::kRowBytes), dq, full_bar(s),
                               kc * BK, q0 + part, static_cast<unsigned short>((1u << Tr::kCluster) - 1), reread);
      }
      if (++kc == KT) {
        kc = 0;
        ++tile;
      }
    }
    if constexpr (Tr::kCluster > 1) {
      // the last release of every stage, by every MMA warp of the cluster: after it no arrival targets this block
      for (int it = total > Tr::kStages ? total - Tr::kStages : 0; it < total; ++it)
        mbar::wait(empty_bar(it % Tr::kStages), (it / Tr::kStages) & 1);
    }
  }

  // End of a split with thread lists: parts 1.. (of every tile group) put their lists in shared memory, part 0
  // inserts them into its own (each list is sorted: the first entry that does not enter ends it) and writes the
  // column's k candidates.
  __device__ __forceinline__ void write_thread_lists(long long list) {
    const int c = tl_col, k = p.k;
    const bool mine = tl_live;
    if (mine && tl_part > 0) {
      float* dk = lkey + ((tl_part - 1) * BQ + c) * k;
      int* di = lidx + ((tl_part - 1) * BQ + c) * k;
      constexpr int KC = Tr::kListCap;
#pragma unroll
      for (int j = 0; j < KC; ++j) {
        if (j >= KC - k) {
          sts(dk + (j - (KC - k)), tl.key[j]);
          sts(di + (j - (KC - k)), tl.idx[j]);
        }
      }
    }
    mma_warps_sync();
    if (!mine || tl_part != 0) return;
    for (int q = 1; q < LIST_PARTS; ++q) {
      const float* sk = lkey + ((q - 1) * BQ + c) * k;
      const int* si = lidx + ((q - 1) * BQ + c) * k;
      for (int j = 0; j < k; ++j) {
        const float ek = lds(sk + j);
        const int ei = lds(si + j);
        if (!tl.admits(ek, ei)) break;
        tl.insert(ek, ei);
      }
    }
    const long long out = (list * p.nq + q0 + c) * k - (Tr::kListCap - k);  // entry j goes to out + j
#pragma unroll
    for (int j = 0; j < Tr::kListCap; ++j) {
      if (j >= Tr::kListCap - k) {
        const bool have = tl.idx[j] != 0x7fffffff;
        if constexpr (!kTrace) p.cand_key[out + j] = have ? tl.key[j] : -f32_inf();
        p.cand_idx[out + j] = have ? tl.idx[j] : -1;
      }
    }
  }

  // MMA=4: FFMA columns for a warp whose n8 query tile has `real` queries (<= 0: padding only). The main loop branches
  // on them twice, to fma_slice<FQ> and to fma_finish<FQ>: one dispatcher taking a generic lambda would need
  // `[&](auto cols)`, which NVRTC rejects (JIT mode takes a generic lambda for a host function).
  __device__ __forceinline__ static int fma_columns(int real) {
    return real <= 1 ? 1 : real <= 2 ? 2 : real <= 4 ? 4 : 8;
  }

  // MMA=4: one slice's k-steps by FFMA over the first FQ query columns of the warp's n8 tile
  template <int FQ>
  __device__ __forceinline__ void fma_slice(Mma& mma, unsigned a_tile, unsigned b_tile, const LdsmLaneAddr<L, 1>& la,
                                            const LdsmLaneAddr<L, 1>& lb) {
#pragma unroll
    for (int ks = 0; ks < Tr::kKSteps; ++ks)
      mma.template fma_kstep<FQ>(a_tile, b_tile, la, lb, warp_n * Tr::kWarpN, warp_q * Tr::kWarpQ, ks, lane);
  }

  __device__ __forceinline__ void run() {
    const int split = static_cast<int>(blockIdx.y);
    const int tile_begin = split * p.tiles_per_split;
    int tile_end = tile_begin + p.tiles_per_split;
    if (Tr::kCluster == 1 && tile_end > p.num_tiles) tile_end = p.num_tiles;  // clusters: see produce()
    const int ntiles = tile_end > tile_begin ? tile_end - tile_begin : 0;
    const int total = ntiles * KT;

    if (tid == 0) trace(kTraceEntry);
    if constexpr (Tr::kTmaProducer) {
      if (tid == 0) {
        for (int s = 0; s < Tr::kStages; ++s) {
          mbar::init(full_bar(s), 1);            // the producer's arrive_expect_tx (+ the copies' bytes)
          // one arrival per MMA warp of the group that reads it, in every block of the cluster
          mbar::init(empty_bar(s), Tr::kGroupWarps * Tr::kCluster);
        }
        if constexpr (Tr::kPingPong) {
          for (int g = 0; g < 2; ++g) mbar::init(order_bar(g), Tr::kGroupWarps);  // the other group's warps
        }
        if constexpr (Tr::kFilterWarps) {
          mbar::init(fw_full_bar(), Tr::kGroupThreads);  // every thread of the dumping tile group
          mbar::init(fw_empty_bar(0), FT);               // every filter thread (even tiles)
          mbar::init(fw_empty_bar(1), FT);               // (odd tiles)
        }
        mbar::fence_init();
      }
      // the last barrier of the whole block: the producer warpgroup leaves here (clusters: of the whole cluster, which
      // also publishes the barriers' initialization to the other blocks before their first arrival or copy)
      if constexpr (Tr::kCluster > 1) cluster::sync();
      else __syncthreads();
      if (warp >= Tr::kWarps) {
        if constexpr (Tr::kMoveRegisters) wg::regs_dec<Tr::kProducerRegs>();
        if (warp == Tr::kWarps) {
          if (lane == 0) trace(kTraceProducerStart);
          produce(tile_begin, tile_end, total);
          if (lane == 0) trace(kTraceProducerDone);
        } else if constexpr (Tr::kFilterWarps) {
          filter_warps_run(tile_begin, ntiles);
        }
        return;
      }
      if constexpr (Tr::kMoveRegisters) wg::regs_inc<Tr::kMmaRegs>();
    }

    if constexpr (Tr::kThreadLists) {
      tl.init(p.k);
      for (int i = tid; i < LIST_PARTS * BQ; i += Tr::kThreads) sts(part_bar + i, -f32_inf());
      for (int c = gtid; c < BQ; c += Tr::kGroupThreads) {  // this tile group's queues and bounds
        sts(queue_count(c), 0);
        if constexpr (kBounds) sts(column_bound(c), -f32_inf());
      }
    } else if constexpr (Tr::kFiltered) {
      for (int c = gtid; c < BQ; c += Tr::kGroupThreads) {
        sts(filter_bound(c), -f32_inf());  // this group's bounds
        if (grp == 0) sts(filter_count(c), 0);  // and the block's counts
      }
      if (grp == 0) filter_reset_global_bars(gtid, Tr::kGroupThreads);
    } else if constexpr (!Tr::kNoLists) {
      for (int c = tid; c < BQ; c += Tr::kThreads) {
        sts(meta + 4 * c, 0);
        sts(meta + 4 * c + 1, 0);
        sts(reinterpret_cast<float*>(meta + 4 * c + 2), -f32_inf());
        sts(meta + 4 * c + 3, 0x7fffffff);
      }
    }
    if constexpr (!Tr::kThreadLists && !Tr::kNoLists) {
      for (int i = tid; i < Tr::kWarpsN * BQ; i += Tr::kThreads) sts(hits + i, 0);
    }
    // (MMA=2: the barrier that opens every epilogue publishes this to the MMA warps; a ping-pong group's barrier
    // covers only its own warps.)
    if constexpr (Tr::kPingPong) mma_warps_sync();
    if (tid == 0) trace(kTraceMmaStart);

    LdsmLaneAddr<L, 1> la, lb;
    la.init(a_lane_row(lane), a_lane_half(lane));
    lb.init(b_lane_row(lane), b_lane_half(lane));

    Mma mma;
    mma.zero();

    // Prologue: STAGES-1 slices in flight. Every thread commits a group per slot, loaded or not, so the
    // wait_group counts below are the same for every thread and every iteration.
    int ld_tile = tile_begin, ld_kc = 0;
    if constexpr (!Tr::kTmaProducer) {
#pragma unroll
      for (int s = 0; s < Tr::kPrefetch; ++s) {
        if (s < total) {
          load(s, ld_tile, ld_kc);
          if (++ld_kc == KT) {
            ld_kc = 0;
            ++ld_tile;
          }
        }
        cp_async_commit();
      }
    }

    if constexpr (Tr::kTmaProducer) {
      // (The lists' initial state is published by the barrier that opens every epilogue, before its pre-check.)
      // Slice `it` waits for its stage's copies (the (it / STAGES)-th completion of full[s]); a warp releases a
      // stage once its MMAs on it are done: slice it - 1 after wait<1> in iteration it, a tile's last slice after
      // the wait<0> that precedes the epilogue.
      // Ping-pong: group g takes tiles tile_begin + g, + g + 2, ...: its slices are ring entries (tile -
      // tile_begin) * KT + kc, in the order the producer fills them. A group starts a tile's main loop only once
      // the other group has left the previous tile's (order[g]: its m-th completion opens group 1's m-th tile and
      // group 0's (m + 1)-th). That is the ping-pong schedule, and it is what makes the parity waits on full[]
      // exact: a stage's previous use was waited on by the other group, so its barrier is at most one phase ahead
      // of the one a group waits for (without it, group 1 could take an earlier phase of the same parity for its
      // own and read a stale slice).
      int it = grp * KT;
      int turn = 0;  // tiles this group has run
      for (int tile = tile_begin + grp; tile < tile_end;
           tile += Tr::kGroups, it += (Tr::kGroups - 1) * KT, ++turn) {
        // MERGE=6: a later turn's bars are staged before its main loop, so that its epilogue reads no L2 (the
        // last turn's is on the critical path); by then the launch's first tiles have raised the words. On the H200
        // at 50K / 100 the search alone took 39.6 us with it against 39.7 (results/similarity_filtered_wsel2_h200
        // .json, similarity_filtered_words4_h200.json): the last epilogue's loads were not what it waits for.
        if constexpr (Tr::kFiltered && Tr::kPingPong)
          if (turn > 0) filter_stage_bars(tile, false);
        if constexpr (Tr::kPingPong) {
          if (grp == 1 || turn > 0) mbar::wait(order_bar(grp), (grp == 1 ? turn : turn - 1) & 1);
        }
        trace_turn = turn;
        trace_turn_event(0);
        for (int kc = 0; kc < KT; ++kc, ++it) {
          const int s = it % Tr::kStages;
          mbar::wait(full_bar(s), (it / Tr::kStages) & 1);
          wgmma_slice(mma, stage_addr(s), la);
          wg::wait<1>();
          wg::fence_operands(mma.acc);
          if (kc > 0) release((it - 1) % Tr::kStages);
        }
        if constexpr (Tr::kPingPong) {
          if (lane == 0) mbar::arrive(order_bar(1 - grp));  // this warp has passed every full[] wait of the tile
        }
        wg::wait<0>();
        wg::fence_operands(mma.acc);
        release((it - 1) % Tr::kStages);
        trace_turn_event(1);
        epilogue(mma, tile, turn == 0);
        trace_turn_event(3);
        mma.zero();
      }
    } else if constexpr (Tr::kWgmma) {
      // Tiles, then slices: the epilogue follows an unconditional wait for every MMA group, outside the slice
      // loop (accumulator reads inside a branch after a conditional wait make ptxas serialize the wgmmas).
      int it = 0;
      for (int tile = tile_begin; tile < tile_end; ++tile) {
        for (int kc = 0; kc < KT; ++kc, ++it) {
          wgmma_slice(mma, begin_slice(it, total, ld_tile, ld_kc), la);
          wg::wait<1>();  // the previous slice's group: its stage is refilled after the next barrier
          wg::fence_operands(mma.acc);
        }
        wg::wait<0>();
        wg::fence_operands(mma.acc);
        epilogue(mma, tile, tile == tile_begin);
        mma.zero();
      }
    } else {
      int tile = tile_begin, kc = 0;
      // MMA=4: this warp's real query columns, as FFMA columns 1, 2, 4 or 8 (padding columns score 0, never read)
      const int fq = Tr::kFma ? fma_columns(p.nq - (q0 + warp_q * Tr::kWarpQ)) : 0;
      for (int it = 0; it < total; ++it) {
        const unsigned a_tile = begin_slice(it, total, ld_tile, ld_kc);
        const unsigned b_tile = a_tile + Tr::kATileBytes;
        const LdsmLaneAddr<L, 1> la_i = la.opaque(), lb_i = lb.opaque();
        if constexpr (Tr::kFma) {
          if (fq == 1) fma_slice<1>(mma, a_tile, b_tile, la_i, lb_i);
          else if (fq == 2) fma_slice<2>(mma, a_tile, b_tile, la_i, lb_i);
          else if (fq == 4) fma_slice<4>(mma, a_tile, b_tile, la_i, lb_i);
          else fma_slice<8>(mma, a_tile, b_tile, la_i, lb_i);
        } else {
#pragma unroll
          for (int ks = 0; ks < Tr::kKSteps; ++ks)
            mma.kstep(a_tile, b_tile, la_i, lb_i, warp_n * Tr::kWarpN, warp_q * Tr::kWarpQ, ks, lane);
        }
        if constexpr (Tr::kNorms) {
          if (warp_q == 0) {
#pragma unroll
            for (int ks = 0; ks < Tr::kKSteps; ++ks) mma.norms_kstep(a_tile, la_i, warp_n * Tr::kWarpN, ks);
          }
        }
        if (++kc == KT) {
          if constexpr (Tr::kFma) {
            if (fq == 1) mma.template fma_finish<1>(lane);
            else if (fq == 2) mma.template fma_finish<2>(lane);
            else if (fq == 4) mma.template fma_finish<4>(lane);
            else mma.template fma_finish<8>(lane);
          }
          epilogue(mma, tile, tile == tile_begin);
          mma.zero();
          kc = 0;
          ++tile;
        }
      }
    }
    if constexpr (!Tr::kTmaProducer) cp_async_wait<0>();
    if constexpr (Tr::kFiltered) {  // the keys are written: their counts
      mma_warps_sync();
      filter_write_counts(tid, Tr::kThreads);
    }
    if constexpr (Tr::kNoLists) {  // the keys are written; nothing else is (MERGE=7: the filter warps' end is done)
      if (tid == 0 && !Tr::kFilterWarps) trace(kTraceDone);
      return;
    }
    // An empty split still writes k missing entries per query; the meta init must be visible to every warp.
    mma_warps_sync();
    if (tid == 0) trace(kTraceEndBarrier);

    // Write the candidate list of each owned query column: best first, missing entries (-inf, -1).
    const long long list = static_cast<long long>(p.list_offset) + split;
    if constexpr (Tr::kThreadLists) {
      write_thread_lists(list);
      if (tid == 0) trace(kTraceDone);
      return;
    }
    for (int c = warp; c < BQ; c += Tr::kWarps) {
      if (q0 + c >= p.nq) break;
      const QueryList ql = list_of(c);
      const int len = lds(ql.meta);
      const int sel = lds(ql.meta + 1);
      const float* Lk = sel ? ql.key1 : ql.key0;
      const int* Li = sel ? ql.idx1 : ql.idx0;
      const long long out = (list * p.nq + q0 + c) * p.k;
      for (int r = lane; r < p.k; r += 32) {
        if constexpr (!kTrace) p.cand_key[out + r] = r < len ? lds(Lk + r) : -f32_inf();
        p.cand_idx[out + r] = r < len ? lds(Li + r) : -1;
      }
    }
  }
};

template <class Tr>
__global__ void __launch_bounds__(Tr::kLaunchThreads, Tr::kMinBlocks) similarity_topk(const __grid_constant__ SearchParams p) {
#ifdef TUNELAB_EXPECTED_SMEM
  static_assert(Tr::kStaticSmemBytes == TUNELAB_EXPECTED_SMEM,
                "launcher smem formula disagrees with the kernel's own layout (TopkTraits::kStaticSmemBytes)");
#endif
  // 1024-byte alignment: the wgmma path's SWIZZLE_128B atoms (the kernels declare no static shared memory, so
  // the dynamic window starts at its base)
  extern __shared__ __align__(1024) unsigned char tunelab_similarity_smem[];
  // A merge or select kernel launched programmatically after this one may be scheduled once every block of this grid
  // has got here (common/pdl.cuh): it takes the SMs these blocks leave and waits for this grid's results.
  pdl_launch_dependents();
  TopkBlock<Tr> blk(p, tunelab_similarity_smem);
  blk.run();
}

// ------------------------------------------------------------------------------------------ merge kernel

// |q|^2 of query q for the cosine and l2 conversions, to *qnorm (nothing for ip). Collective over the warp that
// passes mine = true.
template <int DTYPE, int METRIC>
__device__ __forceinline__ void stash_query_norm2(const MergeParams& p, int q, bool mine, int lane, float* qnorm) {
  if (METRIC == kIP || !mine) return;
  float s = 0.f;
  if constexpr (DTYPE == kF32) {
    const float* qr = static_cast<const float*>(p.queries) + static_cast<long long>(q) * p.q_stride;
    for (int i = lane; i < p.d; i += 32) s = fmaf(qr[i], qr[i], s);
  } else {
    const unsigned short* qr = static_cast<const unsigned short*>(p.queries) + static_cast<long long>(q) * p.q_stride;
    for (int i = lane; i < p.d; i += 32) {
      float x, unused;
      unpack2<DTYPE>(static_cast<unsigned>(qr[i]), x, unused);
      s = fmaf(x, x, s);
    }
  }
#pragma unroll
  for (int m = 16; m > 0; m >>= 1) s += shfl_xor_f(s, m);
  if (lane == 0) sts(qnorm, s);
}

// The selects' diagnosis builds (TUNELAB_SIM_SELECT_TRACE: select.cuh, select_filtered.cuh): %globaltimer, else 0.
__device__ __forceinline__ unsigned long long select_clock() {
#ifdef TUNELAB_SIM_SELECT_TRACE
  return globaltimer_ns();
#else
  return 0;
#endif
}

// Entry `rank` of candidate list l of query q as (key, index), or (NaN, -1) for a missing entry (index -1 in the
// list), which never enters a list. Implicit indices (a dense score matrix) are l * list_len + rank. The key is
// loaded whatever the index (every slot exists), so that the two loads are in flight together.
__device__ __forceinline__ void load_candidate(const MergeParams& p, int q, int l, int rank, float& key, int& ix) {
  const long long at = l * p.list_stride + q * p.query_stride + rank;
  const float kv = p.cand_key[at];
  const int i = p.implicit_index ? l * p.list_len + rank : p.cand_idx[at];
  key = i >= 0 ? kv : f32_nan();
  ix = i >= 0 ? i : -1;
}

// Entry r of query q's merged result: the internal form to out_key/out_idx, the user-facing one (metric applied,
// qn2 = |q|^2 for cosine and l2) to out_score/out_index; a missing entry (have false) as (-inf or +inf, -1).
template <int METRIC>
__device__ __forceinline__ void write_merged(const MergeParams& p, int q, int r, bool have, float key, int ix,
                                             float qn2) {
  key = have ? key : -f32_inf();
  ix = have ? ix : -1;
  const long long out = static_cast<long long>(q) * p.k + r;
  if (p.out_key != nullptr) {
    p.out_key[out] = key;
    p.out_idx[out] = ix;
  }
  if (p.out_score != nullptr) {
    float s = key;
    if constexpr (METRIC == kCosine) s = key / fmaxf(sqrtf(qn2), 1e-12f);
    if constexpr (METRIC == kL2) s = have ? fmaxf(qn2 - key, 0.f) : f32_inf();
    p.out_score[out] = s;
    p.out_index[out] = ix;
  }
}

// Shared memory layout: merge_smem_bytes() in params.cuh (the launcher's and the emulator's formula too).
template <int DTYPE, int METRIC, int WARPS>
__global__ void __launch_bounds__(WARPS * 32) similarity_merge(const __grid_constant__ MergeParams p) {
  static_assert(WARPS >= 1 && WARPS <= 16, "1..16 warps");
  pdl_wait_prior_grid();  // a programmatic launch after the search: its lists are complete from here on
  extern __shared__ __align__(1024) unsigned char tunelab_similarity_smem[];
  constexpr int R = kMergeR;
  const int tid = static_cast<int>(threadIdx.x), lane = tid & 31, warp = tid >> 5;
  const int q = static_cast<int>(blockIdx.x);
  const int k = p.k;
  float* lists = reinterpret_cast<float*>(tunelab_similarity_smem);           // [WARPS][2][k] keys
  int* lidx = reinterpret_cast<int*>(lists + WARPS * 2 * k);                  // [WARPS][2][k] indices
  int* meta = lidx + WARPS * 2 * k;                                           // [WARPS][4]
  float* skey = reinterpret_cast<float*>(meta + 4 * WARPS) + warp * 2 * 32 * R;
  int* sidx = reinterpret_cast<int*>(skey + 32 * R);
  float* qnorm = reinterpret_cast<float*>(meta + 4 * WARPS) + WARPS * 2 * 32 * R;

  auto list_of = [&](int w) {
    QueryList ql;
    ql.key0 = lists + (2 * w) * k;
    ql.key1 = lists + (2 * w + 1) * k;
    ql.idx0 = lidx + (2 * w) * k;
    ql.idx1 = lidx + (2 * w + 1) * k;
    ql.meta = meta + 4 * w;
    return ql;
  };
  if (lane == 0) {
    sts(meta + 4 * warp, 0);
    sts(meta + 4 * warp + 1, 0);
  }
  syncwarp();

  // Phase 1: warp w merges lists w, w + WARPS, ... Candidates are visited rank by rank across its lists
  // (every list's best first), so the bound rises fast and later ranks are rejected by one compare.
  const int my_lists = p.num_lists > warp ? (p.num_lists - warp + WARPS - 1) / WARPS : 0;
  const int total = my_lists * p.list_len;
  const QueryList mine = list_of(warp);
  float v[R], nv[R];
  int id[R], nid[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    v[r] = nv[r] = f32_nan();
    id[r] = nid[r] = -1;
  }
  auto fetch = [&](int base, float (&fv)[R], int (&fi)[R]) {
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const int e = base + r * 32 + lane;
      fv[r] = f32_nan();
      fi[r] = -1;
      if (e < total) {
        const int rank = e / my_lists;
        load_candidate(p, q, warp + (e - rank * my_lists) * WARPS, rank, fv[r], fi[r]);
      }
    }
  };
  if (total > 0) fetch(0, v, id);
  for (int base = 0; base < total; base += 32 * R) {
    // prefetch the next chunk so its global loads overlap this chunk's merge
    if (base + 32 * R < total) fetch(base + 32 * R, nv, nid);
    consume<R, 2>(mine, v, id, k, skey, sidx, lane);
#pragma unroll
    for (int r = 0; r < R; ++r) {
      v[r] = nv[r];
      id[r] = nid[r];
    }
  }

  // |q|^2 for the metric conversion (warp WARPS-1 when there are several, so it overlaps phase 2's start)
  stash_query_norm2<DTYPE, METRIC>(p, q, warp == WARPS - 1, lane, qnorm);
  __syncthreads();

  // Phase 2: warp 0 takes in the other warps' lists, as one concatenation offered 32 * R entries at a time
  // (k = 10 and 8 warps: one consume() instead of seven).
  if (warp != 0) return;
  int total2 = 0;
  for (int w = 1; w < WARPS; ++w) total2 += lds(meta + 4 * w);
  for (int base = 0; base < total2; base += 32 * R) {
#pragma unroll
    for (int r = 0; r < R; ++r) {
      int e = base + r * 32 + lane;
      v[r] = f32_nan();
      id[r] = -1;
      if (e < total2) {
        int w = 1;
        while (e >= lds(meta + 4 * w)) e -= lds(meta + 4 * w++);  // entry e of list w (empty lists are passed)
        const QueryList other = list_of(w);
        const int osel = lds(other.meta + 1);
        v[r] = lds((osel ? other.key1 : other.key0) + e);
        id[r] = lds((osel ? other.idx1 : other.idx0) + e);
      }
    }
    consume<R, 2>(mine, v, id, k, skey, sidx, lane);
  }

  const int len = lds(mine.meta);
  const int sel = lds(mine.meta + 1);
  const float* Lk = sel ? mine.key1 : mine.key0;
  const int* Li = sel ? mine.idx1 : mine.idx0;
  float qn2 = 0.f;
  if constexpr (METRIC != kIP) qn2 = lds(qnorm);
  for (int r = lane; r < k; r += 32) {
    const bool have = r < len;
    write_merged<METRIC>(p, q, r, have, have ? lds(Lk + r) : 0.f, have ? lds(Li + r) : 0, qn2);
  }
}

// The merge for k <= KC (16 or 32) with thread lists: one block of kMergeListWarps warps per query. Every thread
// offers the entries e = tid, tid + threads, ... of the rank-major candidate order (every list's best first, so
// the bars rise fast) to its own ThreadTopk; then the lists are merged across lanes by shuffles (bitonic), and
// the warps' lists by warp 0 through shared memory. Shared memory: merge_smem_bytes() in params.cuh.
template <int DTYPE, int METRIC, int KC>
__global__ void __launch_bounds__(kMergeListWarps * 32) similarity_merge_lists(const __grid_constant__ MergeParams p) {
  constexpr int WARPS = kMergeListWarps, R = 4;
  pdl_wait_prior_grid();  // a programmatic launch after the search: its lists are complete from here on
  extern __shared__ __align__(1024) unsigned char tunelab_similarity_smem[];
  const int tid = static_cast<int>(threadIdx.x), lane = tid & 31, warp = tid >> 5;
  const int q = static_cast<int>(blockIdx.x);
  const int k = p.k;
  float* wkey = reinterpret_cast<float*>(tunelab_similarity_smem);  // [WARPS][KC]
  int* widx = reinterpret_cast<int*>(wkey + WARPS * KC);             // [WARPS][KC]
  float* qnorm = reinterpret_cast<float*>(widx + WARPS * KC);

  ThreadTopk<KC> tl;
  tl.init(k);
  const int total = p.num_lists * p.list_len;
  for (int base = tid; base < total; base += R * WARPS * 32) {
    float v[R];
    int id[R];
#pragma unroll
    for (int r = 0; r < R; ++r) {  // R independent loads in flight
      const int e = base + r * WARPS * 32;
      v[r] = f32_nan();
      id[r] = -1;
      if (e < total) {
        const int rank = e / p.num_lists;
        load_candidate(p, q, e - rank * p.num_lists, rank, v[r], id[r]);
      }
    }
#pragma unroll
    for (int r = 0; r < R; ++r)
      if (tl.admits(v[r], id[r])) tl.insert(v[r], id[r]);
  }
  tl.to_plain();
#pragma unroll
  for (int m = 16; m > 0; m >>= 1) tl.merge_lane(m);
  if (lane == 0) {
#pragma unroll
    for (int j = 0; j < KC; ++j) {
      sts(wkey + warp * KC + j, tl.key[j]);
      sts(widx + warp * KC + j, tl.idx[j]);
    }
  }
  stash_query_norm2<DTYPE, METRIC>(p, q, warp == WARPS - 1, lane, qnorm);
  __syncthreads();
  if (warp != 0) return;
#pragma unroll
  for (int j = 0; j < KC; ++j) {  // lane w < WARPS takes warp w's list, the others stay empty
    tl.key[j] = lane < WARPS ? lds(wkey + lane * KC + j) : -f32_inf();
    tl.idx[j] = lane < WARPS ? lds(widx + lane * KC + j) : 0x7fffffff;
  }
#pragma unroll
  for (int m = WARPS / 2; m > 0; m >>= 1) tl.merge_lane(m);
  float qn2 = 0.f;
  if constexpr (METRIC != kIP) qn2 = lds(qnorm);
  // lanes 0 .. WARPS-1 now hold the merged list; lane 0 writes it
  if (lane == 0) {
#pragma unroll
    for (int j = 0; j < KC; ++j)
      if (j < k) write_merged<METRIC>(p, q, j, tl.idx[j] != 0x7fffffff, tl.key[j], tl.idx[j], qn2);
  }
}

}  // namespace sim
}  // namespace tunelab
