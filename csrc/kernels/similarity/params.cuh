// Kernel parameter blocks of the similarity family, passed by value (__grid_constant__).
// Compiled by both NVRTC (kernels) and the host compiler (csrc/launchers/similarity.cpp packs them), so this
// header includes nothing and uses only types whose layout the two agree on. 8-byte fields come first so that
// the structs have no hidden padding between fields.
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
// [s * tiles_per_split, min((s + 1) * tiles_per_split, num_tiles)) and writes its per-query candidate list
// (k entries, best first; missing entries key = -inf, idx = -1) to list (list_offset + s) of cand_key/cand_idx,
// laid out [list][nq][k].
struct SearchParams {
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
  int pad_;
};

// Final (or running) merge of num_lists candidate lists per query into the k best, sorted (larger key first,
// then smaller index). One block per query. Entry `rank` of list l for query q is at
// l * list_stride + q * query_stride + rank (candidate lists of the search: [list][nq][k], list_len = k;
// a dense nq x N score matrix: query_stride = N, lists = row segments of list_len entries). With
// implicit_index the index of an entry is l * list_len + rank and cand_idx is not read. out_key/out_idx receive
// the internal form ([nq][k], may alias list 0 of the input: the running list of a streamed search);
// out_score/out_index the user-facing form (metric applied: ip and cosine scores descending, squared L2
// distances ascending). Null pointers are skipped.
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
// Warps per query: 8 share the candidate lists; above k = 256 their list buffers (16 k bytes each) would pass
// 32 KiB, so 4.
TUNELAB_SIM_HD constexpr int merge_warps(int k) { return k <= 256 ? 8 : 4; }
// Candidates each merge lane offers per consume() round (scratch list of 32 * kMergeR entries per warp).
constexpr int kMergeR = 4;
// Shared memory of similarity_merge<_, _, WARPS> for k: per warp two list buffers (2 * k * 8 bytes),
// {len, sel, thr_key, thr_idx} (16 bytes) and the scratch list; 16 bytes for |q|^2.
TUNELAB_SIM_HD constexpr long long merge_smem_bytes(int warps, int k) {
  return static_cast<long long>(warps) * (2LL * k * 8 + 16 + 32 * kMergeR * 8) + 16;
}

}  // namespace sim
}  // namespace tunelab
