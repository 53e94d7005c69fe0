// Launcher of the similarity family (csrc/kernels/similarity/): config validation, the shared-memory formulas,
// template instances, launch geometry (split planning) and parameter packing for the top-k search, the
// candidate merge and the Gram kernel. This file is the single source of those rules; Python reaches them
// through tunelab._core.similarity.
#pragma once

#include <array>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/errors.h"
#include "kernels/similarity/params.cuh"
#include "launchers/config.h"

namespace tunelab::launchers::similarity {

using Config = launchers::Config;

// Bad tensors or scalars raise tunelab::InputError, bad config values tunelab::ConfigError (core/errors.h).
using tunelab::InputError;

// Element type codes (as in kernels/similarity/params.cuh): 0 fp16, 1 bf16, 2 fp32, 3 complex64.
int element_bytes(int dtype);

// ------------------------------------------------------------------------------------------------ top-k search
const std::vector<std::string>& topk_param_names();
const std::map<std::string, std::vector<long long>>& topk_param_choices();
// Values of the tunables a config may leave out (configs written before they existed): MMA 0, CLUSTER 1,
// PREFETCH 0. Every search entry point fills them in; so does the Python canonical_config.
const std::map<std::string, long long>& topk_param_defaults();

struct TopkConfig {
    int block_n, block_q, block_k, warps_n, warps_q, stages, vec, merge, epi_rows_param, min_blocks, mma, cluster, prefetch;
    int threads() const { return 32 * warps_n * warps_q; }  // the MMA / top-k warps
    int launch_threads() const { return tunelab::sim::topk_launch_threads(warps_n * warps_q, mma); }
    int epi_rows() const { return block_n < epi_rows_param ? block_n : epi_rows_param; }
};

// Names, values and cross-parameter rules (the kernel's static_asserts); dtype 0..2, metric 0..2.
TopkConfig topk_validate(const Config& config, int dtype, int metric);
// ConfigError when the config's thread lists (MERGE 3, 4) cannot hold k entries.
void topk_check_k(const TopkConfig& c, long long k);
// Shared memory without the per-query lists (= TopkTraits::kStaticSmemBytes), and with them for k.
long long topk_static_smem_bytes(const Config& config, int dtype, int metric);
long long topk_smem_bytes(const Config& config, int dtype, int metric, int k);
int topk_threads(const Config& config);  // threads per block at launch
std::string topk_name_expression(const Config& config, int dtype, int metric);

struct TopkPlan {
    int q_tiles, num_tiles, tiles_per_split, splits;
};
// Grid (q_tiles, splits) for nq queries and a corpus (chunk) of n rows: enough blocks for target_blocks
// resident blocks (SMs x blocks/SM), each scanning a contiguous run of corpus tiles; max_splits caps the
// candidate lists (0 = no cap).
TopkPlan topk_plan(const Config& config, long long nq, long long n, long long target_blocks, long long max_splits);

// SearchParams bytes. Checks sizes against int32, alignment of pointers/strides/d for the config's VEC. MERGE=5
// (dense): cand_key is the [nq][dense_ld] key matrix (16-byte aligned, dense_ld a multiple of kDenseLdAlign,
// >= n), cand_idx is not read, index_base and list_offset are 0. MERGE=6 (filtered): the same, and cand_idx is the
// [nq][dense_ld] int32 candidate rows next to cand_key's keys, dense_ld >= topk_filter_ld(splits, rows per split)
// (a segment per split, then the segments' counts: params.cuh topk_candidate_rows()). The kernel places the counts by
// its grid's y, which must be topk_plan()'s splits (the split count this check assumes), as for every MERGE.
std::string topk_pack(const Config& config, int dtype, unsigned long long queries, unsigned long long corpus,
                      unsigned long long cand_key, unsigned long long cand_idx, long long q_stride, long long c_stride,
                      long long index_base, long long nq, long long n, long long d, long long k, int num_tiles,
                      int tiles_per_split, int list_offset, long long dense_ld = 0);

// Largest copy width in bytes (16, 8 or 4) that the pointers, row strides (elements) and d allow; 0 if none.
int max_vec(int dtype, const std::vector<unsigned long long>& pointers, const std::vector<long long>& strides,
            long long d);

// ------------------------------------------------------------------------------------------------ merge
// The merge kernel variant for k, the candidates per query (lists x list length) and whether every list is sorted
// best first (params.cuh: 0, 1 thread lists of 16, 32 entries; 2, 3 shared lists with 8, 4 warps; 4 sorted lists,
// one warp per query), its threads per block, shared memory for k and template instance.
int merge_kind(long long k, long long candidates, bool sorted_lists);
int merge_threads(int kind);
long long merge_smem_bytes(int kind, int k);
std::string merge_name_expression(int dtype, int metric, int kind);
// MergeParams bytes. list_len <= 0 means the search's candidate lists ([list][nq][k]: list_len = k,
// list_stride = nq * k, query_stride = k); otherwise lists of list_len entries at the given strides (a dense
// score matrix), with implicit indices when implicit_index (cand_idx may then be 0). filtered_rows: the select
// kernel after a MERGE=6 search (per query num_lists segments of list_len entries with explicit indices, then
// their counts in cand_idx: query_stride >= topk_filter_ld(num_lists, list_len)), for kMergeFilterSelect; the
// dense select (kMergeSelect) takes implicit_index rows.
std::string merge_pack(unsigned long long cand_key, unsigned long long cand_idx, unsigned long long queries,
                       long long q_stride, unsigned long long out_key, unsigned long long out_idx,
                       unsigned long long out_score, unsigned long long out_index, long long nq, long long d,
                       long long k, long long num_lists, long long list_len = 0, long long list_stride = 0,
                       long long query_stride = 0, bool implicit_index = false, bool filtered_rows = false);

// ------------------------------------------------------------------------------------------------ Gram
const std::vector<std::string>& gram_param_names();
const std::map<std::string, std::vector<long long>>& gram_param_choices();

struct GramConfig {
    int tile_m, tile_n, tile_k, warps_m, warps_n, stages, vec;
    int threads() const { return 32 * warps_m * warps_n; }
};

// dtype 0 fp16, 1 bf16, 2 fp32, 3 complex64. epilogue 0: |<x_i, y_j>|^2 (Gram), 1: <x_i, y_j> (real, full).
GramConfig gram_validate(const Config& config, int dtype, bool symmetric);
long long gram_smem_bytes(const Config& config, int dtype);
int gram_threads(const Config& config);
std::string gram_name_expression(const Config& config, int dtype, bool symmetric, bool mirror, int epilogue = 0);
// Grid for m rows x (i) and n rows y (j); symmetric needs m == n.
std::array<unsigned, 3> gram_grid(const Config& config, long long m, long long n, bool symmetric);
// GramParams bytes; d counts real scalars per row (2 * dim for complex64), strides likewise. For a Gram
// matrix y = x and m = n.
std::string gram_pack(const Config& config, int dtype, bool symmetric, unsigned long long x, unsigned long long y,
                      unsigned long long out, long long x_stride, long long y_stride, long long out_stride, long long m,
                      long long n, long long d);

}  // namespace tunelab::launchers::similarity
