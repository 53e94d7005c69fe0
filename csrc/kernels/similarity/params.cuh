// Kernel parameter blocks of the similarity family, passed by value (__grid_constant__).
// Compiled by both NVRTC (kernels) and the host compiler (csrc/launchers/similarity.cpp packs them), so this
// header includes nothing and uses only types whose layout the two agree on. 8-byte fields come first so that
// the structs have no hidden padding between fields (the 64-byte aligned tensor maps come before them).
#pragma once

namespace tunelab {
namespace sim {

// Element type codes shared with the launcher and the Python ops.
enum : int { kF16 = 0, kBF16 = 1, kF32 = 2, kC64 = 3 };
// Metric codes. The kernels rank by a "key" where larger is better:
//   ip:     key = <q, c>
//   cosine: key = <q, c> / max(|c|, 1e-12)          (|q| is a positive constant per query: applied at the end)
//   l2:     key = 2 <q, c> - |c|^2 = |q|^2 - |q - c|^2 (|q|^2 is constant per query: applied at the end)
enum : int { kIP = 0, kCosine = 1, kL2 = 2 };

// Top-k search over one corpus (or one chunk of it). Grid: (query tiles, splits). Split s scans corpus tiles
// [s * tiles_per_split, min((s + 1) * tiles_per_split, num_tiles)) (with CLUSTER > 1 every block walks
// tiles_per_split tiles, those past num_tiles empty, so that the blocks of a cluster fill their shared ring in
// step; splits is then a multiple of CLUSTER) and writes its per-query candidate list
// (k entries, best first; missing entries key = -inf, idx = -1) to list (list_offset + s) of cand_key/cand_idx,
// laid out [list][nq][k]. MERGE=5 (dense) keeps no top-k: it writes every key of the split's tiles to the dense
// key matrix cand_key, [nq][dense_ld] (the key of query q and corpus row r at q * dense_ld + r; entries past n are
// not written), and the select kernel (merge kind kMergeSelect) picks each row's k best.
// MMA 2 and 3 (TMA producer) read the queries and the corpus through tensor maps the launcher encodes (zeros
// elsewhere): 2-D, 16-bit elements, boxes of 64 columns x BLOCK_N corpus rows / topk_query_rows() / CLUSTER query
// rows, 128-byte swizzle (CUtensorMap's bytes).
struct alignas(64) SearchParams {
  unsigned long long tma_queries[16];
  unsigned long long tma_corpus[16];
  const void* queries;   // [nq][d], row stride q_stride elements
  const void* corpus;    // [n][d], row stride c_stride elements
  float* cand_key;
  int* cand_idx;
  long long q_stride;
  long long c_stride;
  long long index_base;  // added to corpus row numbers (chunked / streamed corpora); result must fit in int32
  int nq;
  int n;
  int d;
  int k;
  int num_tiles;         // ceil(n / BLOCK_N)
  int tiles_per_split;
  int list_offset;
  int dense_ld;          // MERGE=5, 6: floats between rows of the key matrix (a multiple of kDenseLdAlign); else 0
};

// Final (or running) merge of num_lists candidate lists per query into the k best, sorted (larger key first,
// then smaller index). One block per query. Entry `rank` of list l for query q is at
// l * list_stride + q * query_stride + rank (candidate lists of the search: [list][nq][k], list_len = k;
// a dense nq x N score matrix: query_stride = N, lists = row segments of list_len entries). With
// implicit_index the index of an entry is l * list_len + rank and cand_idx is not read. out_key/out_idx receive
// the internal form ([nq][k], may alias list 0 of the input: the running list of a streamed search);
// out_score/out_index the user-facing form (metric applied: ip and cosine scores descending, squared L2
// distances ascending). Null pointers are skipped. The select kernel (kMergeSelect) reads one row per query:
// with implicit_index the row of a MERGE=5 dense key matrix (list_len = N entries); without, the row of a MERGE=6
// search's candidates: num_lists segments of list_len entries (one per split), segment l holding its count, read
// from cand_idx at offset num_lists * list_len + l, of entries from its start (topk_candidate_rows()).
struct MergeParams {
  const float* cand_key;
  const int* cand_idx;
  const void* queries;   // for |q| (cosine, l2); may be null for ip
  float* out_key;
  int* out_idx;
  float* out_score;
  long long* out_index;
  long long q_stride;    // elements between query rows (of `queries`)
  long long list_stride;
  long long query_stride;
  int nq;
  int d;
  int k;
  int num_lists;
  int list_len;
  int implicit_index;
};

// Gram matrix K_ij = |<x_i, x_j>|^2 of n states (y = x, m = n), or the plain product out_ij = <x_i, y_j> of
// two matrices (the unfused search ablation). For complex64 the states are read as interleaved (re, im)
// floats: d counts real scalars (2 * dim) and the strides are in floats.
struct GramParams {
  const void* x;         // rows i (m of them)
  const void* y;         // rows j (n of them); = x for a Gram matrix
  float* out;
  long long x_stride;    // scalars between rows
  long long y_stride;
  long long out_stride;  // floats between output rows
  int m;
  int n;
  int d;
  int tiles;             // ceil(n / TILE) per side (symmetric mode); tiles along j otherwise
};

// The merge kernel's geometry, used by the kernel, the launcher and the emulator alike: host and device
// functions for NVRTC (which compiles no host code), plain functions for the host compiler.
#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define TUNELAB_SIM_HD __host__ __device__
#else
#define TUNELAB_SIM_HD
#endif
// Running top-k of the search kernel (MERGE): 0..2 keep one list per query in shared memory, merged by a warp per
// tile (0 rank, 1 bitonic, 2 hybrid); 3 and 4 keep a sorted list in the registers of every thread (capacity 16
// and 32: k must not exceed it), each thread owning one query column and a 1 / parts share of the tile's rows.
// 5 keeps none: the search writes every key to a dense [nq][N] matrix (it stays in L2 where nq x N x 4 bytes is
// small next to it), and the select kernel (merge kind kMergeSelect) takes each row's k best.
TUNELAB_SIM_HD constexpr int thread_list_capacity(int merge) { return merge == 3 ? 16 : merge == 4 ? 32 : 0; }
TUNELAB_SIM_HD constexpr bool topk_thread_lists(int merge) { return merge == 3 || merge == 4; }
constexpr int kMergeDense = 5;
TUNELAB_SIM_HD constexpr bool topk_dense(int merge) { return merge == kMergeDense; }
// 6 (filtered) keeps none either, and writes only the keys that can still be in the answer. Split s of the grid
// owns segment s of each query's candidate row (entries [s R, s R + R), R = tiles_per_split * BLOCK_N rows: room
// for every row of the split) and appends there every key of its tiles that reaches its block's bar for the query,
// with the key's row; the count of segment s goes to the row's cand_idx at offset splits * R + s
// (topk_filter_ld()). The bar: each tile group's first tile bounds each query column by the k-th largest of its
// holders' maxima (k keys of that tile are at least as large, and that group appends them) and raises the query's
// global bar (a word of cand_key at the same offset splits * R, atomic max) to it, and one of k words of the first
// tiles' maxima after it (kFilterWords); every tile filters by the largest of its block's two groups' bounds, the
// global bar and the smallest of the k words once all are raised (TopkBlock::filter_bound_pass() says why the answer
// stays exact, ties included). No state outlives the launch: every block resets its queries' global words at its
// start, and the select kernel reads the counts the search wrote.
constexpr int kMergeFiltered = 6;
// 7 (filter warps) writes the same candidate rows and words as 6, but its MMA warps only copy each tile's keys to a
// shared score tile, and three warps of the producer warpgroup (MMA 2, 3), which do not multiply, filter them there
// (TopkBlock::filter_warps_run()): the bounds, the words, their waits and the appends leave the tensor cores' path.
constexpr int kMergeFilterWarps = 7;
TUNELAB_SIM_HD constexpr bool topk_filter_warps(int merge) { return merge == kMergeFilterWarps; }
// MERGE 6 and 7: the search's output is candidate rows (the layout above), read by the filtered select. (TopkTraits::
// kFiltered is MERGE=6 alone: the MMA warps' filtered epilogue.)
TUNELAB_SIM_HD constexpr bool topk_candidate_rows(int merge) {
  return merge == kMergeFiltered || merge == kMergeFilterWarps;
}
// MERGE 5, 6 and 7: no running top-k in the search (the select kernel after it takes the k best).
TUNELAB_SIM_HD constexpr bool topk_keeps_lists(int merge) { return merge <= 4; }
// MERGE=7's shared memory past the ring: the score tile ([BLOCK_Q][BLOCK_N + 4] floats: = 4 mod 32 words, so that
// the MMA warps' fragment stores are conflict-free), per query column 4 words (the staged bar, the block's bound,
// the block's count, the first tile's held keys), three mbarriers (the tile is full; the filter warps are done with
// an even tile, with an odd one) in 32 bytes, then the first tile's held keys and rows, [BLOCK_Q][cap + 1] each
// (kFilterHeld; the odd pitch: a thread per column, conflict-free).
constexpr int kFilterHeld = 32;
TUNELAB_SIM_HD constexpr int topk_filter_tile_pitch(int block_n) { return block_n + 4; }
TUNELAB_SIM_HD constexpr int topk_filter_tile_bytes(int block_q, int block_n) {
  return block_q * topk_filter_tile_pitch(block_n) * 4 + block_q * 16 + 32 + block_q * (kFilterHeld + 1) * 8;
}
// MERGE=7: the producer warpgroup's warps 1..3 filter (named barrier 4 over them).
constexpr int kFilterWarpCount = 3;
// Accumulator holders of one query column in a tile group (the bound passes of MERGE 3, 4 and 6): 8 lanes of every
// warp row of the group.
TUNELAB_SIM_HD constexpr int topk_column_holders(int group_warps, int warps_q) { return 8 * group_warps / warps_q; }
// MERGE=6: words per query column in the group's filter region: its holders' maxima, its bound, the block's count
// of the column's appended keys (group 0's region), and 2 words of padding (rows of whole 16-byte units).
TUNELAB_SIM_HD constexpr int topk_filter_pitch(int group_warps, int warps_q) {
  return topk_column_holders(group_warps, warps_q) + 4;
}
// Row stride (floats) of MERGE=5's dense key matrix over n rows: n rounded up to a multiple of kDenseLdAlign, so that
// every row is 16-byte aligned for the select kernel's copies. The launcher's check, the op's allocation
// (ops.similarity.dense_ld, through the binding) and the emulator take it from here.
constexpr int kDenseLdAlign = 4;
TUNELAB_SIM_HD constexpr long long topk_dense_ld(long long n) {
  return (n + kDenseLdAlign - 1) / kDenseLdAlign * kDenseLdAlign;
}
// MERGE=6's global words per query, in cand_key after the segments (TopkBlock::global_bar(), 16-byte aligned): the
// bar of the groups' bounds, the count of first tiles that raised their maxima (the block row's first query's), two
// unused, then k <= 32 words of the first tiles' maxima (read and reset 4 at a time).
constexpr int kFilterWords = 36;
constexpr int kFilterTileWord0 = 4;
// With ping-pong, a group's first tile waits for the launch's other first tiles' words (TopkBlock::filter_wait_words):
// until this percent of them have raised theirs, or this many nanoseconds have passed (0: no wait), reading their
// count every ~POLL_NS. Macros for an experiment (benchmarks/similarity_filtered.py --variant).
#ifndef TUNELAB_SIM_FILTER_WAIT_NS
#define TUNELAB_SIM_FILTER_WAIT_NS 4000
#endif
#ifndef TUNELAB_SIM_FILTER_WAIT_PCT
#define TUNELAB_SIM_FILTER_WAIT_PCT 50
#endif
#ifndef TUNELAB_SIM_FILTER_POLL_NS
#define TUNELAB_SIM_FILTER_POLL_NS 256
#endif
// Row stride of MERGE=6's candidate rows (cand_key and cand_idx) for `splits` segments of `seg_rows` entries:
// the segments, then (in cand_idx) their counts and (in cand_key) the global words, rounded up like topk_dense_ld().
TUNELAB_SIM_HD constexpr long long topk_filter_ld(long long splits, long long seg_rows) {
  return topk_dense_ld(splits * seg_rows + (splits > kFilterWords ? splits : kFilterWords));
}
// Splits of a search over `tiles` corpus tiles, `per` a split, with clusters of `cluster` blocks along the splits:
// no empty split but the last cluster's (the launcher's topk_plan(), and its MERGE=6 check of the rows).
TUNELAB_SIM_HD constexpr long long topk_splits(long long tiles, long long per, long long cluster) {
  return ((tiles + per - 1) / per + cluster - 1) / cluster * cluster;
}
// Threads per query column with thread lists: threads / BLOCK_Q rounded down to a power of two, at most 4.
TUNELAB_SIM_HD constexpr int thread_list_parts(int threads, int block_q) {
  return threads / block_q >= 4 ? 4 : threads / block_q >= 2 ? 2 : 1;
}
// Main loops (MMA): 0 mma.sync, 1 wgmma fed by cp.async, 2 wgmma fed by a TMA producer warpgroup (the MMA warps
// share every tile), 3 = 2 with ping-pong warpgroups (each of the two MMA warpgroups owns every other tile),
// 4 = 0's warp tiles and cp.async ring with fp32 products on the CUDA cores (FFMA; fp32 inputs, one n8 query tile
// per warp: see mma_tile.cuh WarpMma::fma_kstep).
TUNELAB_SIM_HD constexpr bool topk_uses_wgmma(int mma) { return mma >= 1 && mma <= 3; }
TUNELAB_SIM_HD constexpr bool topk_uses_tma(int mma) { return mma == 2 || mma == 3; }
TUNELAB_SIM_HD constexpr bool topk_uses_fma(int mma) { return mma == 4; }
// Groups of MMA warps that run tiles of their own: 2 for ping-pong (MMA=3), else 1 (every warp works on each tile).
TUNELAB_SIM_HD constexpr int topk_tile_groups(int mma) { return mma == 3 ? 2 : 1; }
// Threads per search block at launch: the MMA (and top-k) warps, plus the TMA producer warpgroup (MMA 2, 3).
TUNELAB_SIM_HD constexpr int topk_launch_threads(int warps, int mma) {
  return 32 * warps + (topk_uses_tma(mma) ? 128 : 0);
}
// Shared memory of the search kernel's mbarriers (8 bytes each): the TMA ring's full[STAGES] and empty[STAGES]
// (MMA 2, 3) and ping-pong's order[2] (MMA=3).
TUNELAB_SIM_HD constexpr int topk_mbarrier_bytes(int mma, int stages) {
  return topk_uses_tma(mma) ? 16 * stages + (mma == 3 ? 16 : 0) : 0;
}
// Thread-block clusters (CLUSTER, MMA 2 and 3 only): the CLUSTER blocks of a cluster take consecutive splits of the
// same query tile, and each TMA-multicasts 1 / CLUSTER of every query slice to all of them, so L2 serves each
// query byte once per cluster instead of once per block. A part is whole 8-row swizzle atoms (1024 bytes): the
// query tile's rows in shared memory are BLOCK_Q rounded up to 8 * CLUSTER (the rows past BLOCK_Q are loaded and
// never read).
TUNELAB_SIM_HD constexpr bool topk_cluster_ok(int cluster, int mma) {
  return cluster == 1 || ((cluster == 2 || cluster == 4) && topk_uses_tma(mma));
}
// L2 prefetch (PREFETCH, MMA 2, 3): when a block starts a corpus tile its producer asks L2 for every slice of the
// tile PREFETCH tiles ahead at once, so DRAM sees whole rows (d elements) requested together instead of one
// 128-byte piece per row per slice.
TUNELAB_SIM_HD constexpr bool topk_prefetch_ok(int prefetch, int mma) {
  return prefetch == 0 || ((prefetch == 1 || prefetch == 2) && topk_uses_tma(mma));
}
TUNELAB_SIM_HD constexpr int topk_query_rows(int block_q, int cluster) {
  return cluster == 1 ? block_q : (block_q + 8 * cluster - 1) / (8 * cluster) * (8 * cluster);
}
// Thread-list parts per query column in a whole block (MERGE 3, 4): those of each tile group (its threads /
// BLOCK_Q, thread_list_parts()) times the groups. `threads` counts the MMA threads of the block.
TUNELAB_SIM_HD constexpr int topk_list_parts(int threads, int block_q, int mma) {
  return topk_tile_groups(mma) * thread_list_parts(threads / topk_tile_groups(mma), block_q);
}
// Dynamic shared memory of the search kernel that depends on k: two list buffers per query (MERGE 0..2), or the
// lists of parts 1.. handed to part 0 at the end of a split (MERGE 3, 4).
// MERGE 5 and 6 keep no lists.
TUNELAB_SIM_HD constexpr long long topk_list_bytes(int merge, int threads, int block_q, int k, int mma) {
  return !topk_keeps_lists(merge) ? 0
                           : (topk_thread_lists(merge) ? topk_list_parts(threads, block_q, mma) - 1 : 2) *
                                 static_cast<long long>(block_q) * k * 8;
}

// The merge kernel's variants ("kinds"), chosen by k, the candidates per query and whether the lists are sorted:
//   kMergeSorted (4)      the search's lists (each sorted best first) with k <= 32: one warp per query bounds the
//                         candidates by the list heads and walks only the lists that can reach the top k
//                         (similarity_merge_sorted, merge_sorted.cuh). On the H200 at k = 10, nq = 100 over 131 lists
//                         the shared-list merge below took 15-16 us on real lists (benchmarks/similarity_gap.py).
//   kMergeLists16/32 (0/1) unsorted lists (the rows of a dense score matrix: the unfused ablation) with k <= 16 / 32
//                         and at least kMergeListsMinCandidates candidates per query: thread lists of 16 or 32
//                         entries (similarity_merge_lists<_, _, 16 or 32>, kMergeListWarps warps).
//   kMergeShared8/4 (2/3) anything else: shared lists merged by warps (similarity_merge<_, _, 8 or 4>: above k = 256
//                         eight warps' list buffers, 16 k bytes each, would pass 32 KiB).
//   kMergeSelect (5)      one row of a dense key matrix per query (the search with MERGE=5: one list of N entries,
//                         implicit indices) with k <= 32: a block of kSelectThreads threads bounds the row by its
//                         threads' maxima and ranks the few entries that reach the bound (similarity_select,
//                         select.cuh). merge_kind() never picks it: the dense search's caller asks for it.
//   kMergeFilterSelect (6) the candidate rows of a MERGE=6 search (a segment of appended keys per split, explicit
//                         indices) with k <= 32: one warp per query keeps the entries that reach the search's bars
//                         and merges them into a running top 32 (similarity_select_filtered, select_filtered.cuh).
//                         merge_kind() never picks it either.
enum : int {
  kMergeLists16 = 0,
  kMergeLists32 = 1,
  kMergeShared8 = 2,
  kMergeShared4 = 3,
  kMergeSorted = 4,
  kMergeSelect = 5,
  kMergeFilterSelect = 6
};
constexpr int kMergeKinds = kMergeFilterSelect + 1;  // kinds 0 .. kMergeKinds - 1
// The select kernel: threads per block, the row entries it holds in shared memory (204 KiB: N = 50K fits; the
// rest of a longer row is read from global memory twice), its queue and the largest k it takes.
constexpr int kSelectThreads = 1024;
#ifdef TUNELAB_SIM_SELECT_WINDOW  // the CPU emulator's builds: a small window, so that its rows also pass it
constexpr int kSelectWindow = TUNELAB_SIM_SELECT_WINDOW;
#else
constexpr int kSelectWindow = 51 * 1024;
#endif
constexpr int kSelectCap = 1024;
constexpr int kSelectMaxK = 32;
// The filtered select (select_filtered.cuh): segments a lane takes per round (32 x this a round), entries it loads
// from each at once, and the kept entries its buffer holds. 96 KiB of them: the sort runs only when it fills and
// at the end, and at most two of its one-warp blocks share a SM (a programmatic launch places its blocks on the
// SMs the search frees, as many as fit: 32 one-warp blocks of a small buffer could land on one SM).
constexpr int kFilterSelectSegs = 8;
constexpr int kFilterSelectLoads = 4;
constexpr int kFilterSelectKept = 12 * 1024;
// A filtered select's buffers for J segments a lane per round and KEPT kept entries (select_filtered_query()).
TUNELAB_SIM_HD constexpr int select_filtered_smem_bytes(int j, int kept) { return kept * 8 + 32 * j * 4; }
constexpr int kMergeListWarps = 8;
constexpr long long kMergeListsMinCandidates = 16384;
constexpr int kMergeSortedMaxK = 32;
TUNELAB_SIM_HD constexpr int merge_kind(int k, long long candidates, bool sorted_lists) {
  return sorted_lists && k <= kMergeSortedMaxK                  ? kMergeSorted
         : k <= 32 && candidates >= kMergeListsMinCandidates ? (k <= 16 ? kMergeLists16 : kMergeLists32)
         : k <= 256                                           ? kMergeShared8
                                                              : kMergeShared4;
}
TUNELAB_SIM_HD constexpr int merge_kind_warps(int kind) {
  return kind == kMergeSorted || kind == kMergeFilterSelect ? 1
         : kind == kMergeShared4 ? 4
         : kind == kMergeShared8 ? 8
         : kind == kMergeSelect  ? kSelectThreads / 32
                                 : kMergeListWarps;
}
// Entries of a merge kind's thread lists (the largest k it takes); 0 for the shared-list kinds (any k).
TUNELAB_SIM_HD constexpr int merge_kind_capacity(int kind) {
  return kind == kMergeLists16 ? 16 : kind == kMergeLists32 ? 32 : 0;
}
// The largest k a merge kind takes (0: any k).
TUNELAB_SIM_HD constexpr int merge_kind_max_k(int kind) {
  return kind == kMergeSorted                                ? kMergeSortedMaxK
         : kind == kMergeSelect || kind == kMergeFilterSelect ? kSelectMaxK
                                                              : merge_kind_capacity(kind);
}
// Candidates each merge lane offers per consume() round (scratch list of 32 * kMergeR entries per warp).
constexpr int kMergeR = 4;
// Hot-list ids the sorted merge collects per batch (32 x kSortedMergeRounds in merge_sorted.cuh), and the kept
// entries it buffers (fewer than 32 waiting for a merge, plus one load's 32).
constexpr int kSortedMergeHotIds = 32 * 8;
constexpr int kSortedMergeKept = 64;
// Shared memory of a merge kind for k. Shared lists: per warp two list buffers (2 * k * 8 bytes),
// {len, sel, thr_key, thr_idx} (16 bytes) and the scratch list; thread lists: each warp's merged list
// (capacity * 8 bytes); sorted lists: 64 kept entries and the hot-list ids; select: the window of the row, the
// queue (8 bytes an entry) and the warps' largest and k-th largest maxima (32 each); filtered select: its kept
// entries and the round's segment counts; all: 16 bytes for the queue count, the bar and |q|^2.
TUNELAB_SIM_HD constexpr long long merge_smem_bytes(int kind, int k) {
  return kind == kMergeSelect ? kSelectWindow * 4LL + kSelectCap * 8LL + 2 * 32 * 4LL + 16
         : kind == kMergeSorted ? kSortedMergeKept * 8LL + kSortedMergeHotIds * 4LL + 16
         : kind == kMergeFilterSelect ? select_filtered_smem_bytes(kFilterSelectSegs, kFilterSelectKept) + 16LL
         : merge_kind_capacity(kind) > 0
             ? kMergeListWarps * merge_kind_capacity(kind) * 8LL + 16
             : static_cast<long long>(merge_kind_warps(kind)) * (2LL * k * 8 + 16 + 32 * kMergeR * 8) + 16;
}

// The search's diagnosis build (TUNELAB_SIM_TRACE, TopkBlock::trace()): each block writes kTraceSlots u64 event
// stamps (%globaltimer) into the candidate-key buffer, then as many clock64 values. Slots: the events below; a tile
// group's turn u < kTraceTurns - 1 at kTraceTurn0 + (group * kTraceTurns + u) * 4 + {0: its main loop starts, 1: its
// MMAs are done, 2: the pre-check's barrier passed, 3: the epilogue is done} (later turns overwrite the last turn's);
// kTraceScan + group: the group's last store-and-scan, 0 if none; kTraceWhy + group: why (TopkBlock::trace_why());
// MERGE=6, a group's first tile: kTraceFirst0 + group * kTraceFirstSteps + {0: the holders' maxima are stored, 1: the
// bounds are selected and the global bar raised, 2: the tile-maximum words are raised and counted, 3: the wait for
// the other first tiles' words is over, 4: the tile's bars are staged} (TopkBlock::trace_first()).
// benchmarks/similarity_probe.py decodes them through the binding (_core.similarity.TRACE_SLOTS).
enum : int {
  kTraceSlots = 80,
  kTraceEntry = 0,
  kTraceProducerStart = 1,
  kTraceProducerDone = 2,
  kTraceMmaStart = 3,
  kTraceSmid = 4,
  kTraceTurn0 = 8,
  kTraceTurns = 6,
  kTraceEndBarrier = 56,
  kTraceDone = 57,
  kTraceScan = 58,
  kTraceWhy = 60,
  kTraceFirst0 = 64,
  kTraceFirstSteps = 5
};

}  // namespace sim
}  // namespace tunelab
