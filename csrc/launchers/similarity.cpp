#include "launchers/similarity.h"

#include <algorithm>
#include <climits>
#include <cstring>
#include <sstream>

#include "core/errors.h"
#include "core/tma_desc.h"
#include "launchers/args.h"
#include "launchers/config.h"
#include "kernels/similarity/params.cuh"

namespace tunelab::launchers::similarity {

namespace {

const char* dtype_name(int dtype) {
    switch (dtype) {
        case 0: return "fp16";
        case 1: return "bf16";
        case 2: return "fp32";
        case 3: return "complex64";
        default: return "?";
    }
}

}  // namespace

int element_bytes(int dtype) {
    if (dtype == 0 || dtype == 1) return 2;
    if (dtype == 2 || dtype == 3) return 4;
    throw ConfigError("dtype code " + std::to_string(dtype) + " is not 0 (fp16), 1 (bf16), 2 (fp32) or 3 (complex64)");
}

// ------------------------------------------------------------------------------------------------ top-k search

const std::vector<std::string>& topk_param_names() {
    static const std::vector<std::string> names = {"BLOCK_N", "BLOCK_Q",  "BLOCK_K",    "WARPS_N", "WARPS_Q",
                                                   "STAGES",  "VEC",      "MERGE",      "EPI_ROWS", "MIN_BLOCKS",
                                                   "MMA",     "CLUSTER",  "PREFETCH"};
    return names;
}

const std::map<std::string, std::vector<long long>>& topk_param_choices() {
    static const std::map<std::string, std::vector<long long>> choices = [] {
        std::map<std::string, std::vector<long long>> c = {
            {"BLOCK_N", {64, 128, 192, 256}},  // corpus rows per tile (MMA M side; 192: MMA=3 only)
            {"BLOCK_K", {16, 32, 64, 128}},  // elements of d per pipeline slice (x element bytes: 64..256 B)
            {"WARPS_N", {1, 2, 4, 8}},       // warps along the corpus rows
            {"WARPS_Q", {1, 2, 4}},          // warps along the queries
            {"STAGES", {2, 3, 4, 5, 6}},     // cp.async ring depth
            {"VEC", {4, 8, 16}},             // bytes per cp.async
            {"MERGE", {0, 1, 2, 3, 4, 5, 6, 7}},  // 0 rank merge, 1 bitonic, 2 hybrid, 3/4 thread lists (k <= 16/32),
                                                  // 5 dense: every key to an nq x N matrix, then the select kernel;
                                                  // 6 filtered: the keys that reach their block's bar, then the
                                                  // select; 7 = 6 filtered by the producer warpgroup (MMA 2, 3)
            {"EPI_ROWS", {64, 128}},         // corpus rows per top-k epilogue pass (score tile height)
            {"MIN_BLOCKS", {1, 2}},          // __launch_bounds__ minimum blocks per SM (2: <= 128 registers)
            {"MMA", {0, 1, 2, 3, 4}},        // 0 mma.sync warp tiles, 1 wgmma warpgroup tiles, 2 = 1 fed by TMA,
                                             // 3 = 2 with ping-pong warpgroups, 4 = 0 with fp32 FFMA (few queries)
            {"CLUSTER", {1, 2, 4}},          // blocks per cluster sharing each query slice (TMA multicast; MMA 2, 3)
            {"PREFETCH", {0, 1, 2}},         // L2 prefetch distance in corpus tiles (TMA prefetch; MMA 2, 3)
        };
        std::vector<long long> q;
        for (int b = 8; b <= 128; b += 8) q.push_back(b);  // queries per block (MMA N side, n8 steps)
        c["BLOCK_Q"] = q;
        return c;
    }();
    return choices;
}

const std::map<std::string, long long>& topk_param_defaults() {
    static const std::map<std::string, long long> defaults = {{"MMA", 0}, {"CLUSTER", 1}, {"PREFETCH", 0}};
    return defaults;
}

namespace {
// checked() for the search, with topk_param_defaults() for the tunables the config leaves out.
std::map<std::string, int> topk_values(const Config& config) {
    Config with = config;
    for (const auto& [name, value] : topk_param_defaults()) with.emplace(name, value);
    return checked("similarity", with, topk_param_names(), topk_param_choices());
}
}  // namespace

TopkConfig topk_validate(const Config& config, int dtype, int metric) {
    const char* fam = "similarity";
    auto v = topk_values(config);
    if (dtype < 0 || dtype > 2)
        config_error(fam, "dtype code " + std::to_string(dtype) + " is not 0 (fp16), 1 (bf16) or 2 (fp32)");
    if (metric < 0 || metric > 2) config_error(fam, "metric code " + std::to_string(metric) + " is not 0 (ip), 1 (cosine), 2 (l2)");
    TopkConfig c{v["BLOCK_N"], v["BLOCK_Q"], v["BLOCK_K"],  v["WARPS_N"],    v["WARPS_Q"], v["STAGES"],
                 v["VEC"],     v["MERGE"],   v["EPI_ROWS"], v["MIN_BLOCKS"], v["MMA"],     v["CLUSTER"],
                 v["PREFETCH"]};
    const int row_bytes = c.block_k * element_bytes(dtype);
    if (row_bytes != 64 && row_bytes != 128 && row_bytes != 256)
        config_error(fam, "BLOCK_K=" + std::to_string(c.block_k) + " x " + std::to_string(element_bytes(dtype)) + " bytes (" +
                     dtype_name(dtype) + ") = " + std::to_string(row_bytes) +
                     " bytes per row slice; it must be 64, 128 or 256 (the swizzled layout's row sizes)");
    // a ping-pong warpgroup owns every row of its tiles in m64 blocks (checked with the wgmma rules below)
    if (c.mma != 3 && c.block_n % (16 * c.warps_n) != 0)
        config_error(fam, "BLOCK_N=" + std::to_string(c.block_n) + " is not a multiple of 16 * WARPS_N=" +
                     std::to_string(16 * c.warps_n) + " (each warp owns whole m16 row tiles)");
    if (c.block_n == 192 && (c.mma != 3 || c.epi_rows() != 64))
        config_error(fam, "BLOCK_N=192 (three m64 row blocks per warpgroup) is for MMA=3 with EPI_ROWS=64 (whole "
                          "epilogue passes); got MMA=" + std::to_string(c.mma) + ", EPI_ROWS=" +
                          std::to_string(c.epi_rows_param) + ": use BLOCK_N 128 or 256 otherwise");
    if (c.block_q % (8 * c.warps_q) != 0)
        config_error(fam, "BLOCK_Q=" + std::to_string(c.block_q) + " is not a multiple of 8 * WARPS_Q=" +
                     std::to_string(8 * c.warps_q) + " (each warp owns whole n8 query tiles)");
    const int warps = c.warps_n * c.warps_q;
    if (warps < 2 || warps > 16)
        config_error(fam, "WARPS_N * WARPS_Q = " + std::to_string(warps) + " warps; a block has 2 to 16 warps");
    if (c.min_blocks * c.launch_threads() > 2048)
        config_error(fam, "MIN_BLOCKS=" + std::to_string(c.min_blocks) + " x " + std::to_string(c.launch_threads()) +
                     " threads exceeds 2048 threads per SM");
    if (tunelab::sim::topk_thread_lists(c.merge) && c.threads() < c.block_q)
        config_error(fam, "MERGE=" + std::to_string(c.merge) + " (thread lists) needs a thread per query column: " +
                     std::to_string(c.threads()) + " threads < BLOCK_Q=" + std::to_string(c.block_q) +
                     "; use more warps, a smaller BLOCK_Q or MERGE 0..2");
    if (tunelab::sim::topk_uses_fma(c.mma)) {  // TopkTraits' and WarpMma's static_asserts for FMA
        const std::string why = "MMA=4 (fp32 products on the CUDA cores, FFMA) needs ";
        if (dtype != 2)
            config_error(fam, why + "fp32 inputs; " + dtype_name(dtype) + " runs on the tensor cores: use MMA 0..3");
        if (c.block_q != 8 * c.warps_q)
            config_error(fam, why + "one n8 query tile per warp: BLOCK_Q = 8 * WARPS_Q; got BLOCK_Q=" +
                                  std::to_string(c.block_q) + ", WARPS_Q=" + std::to_string(c.warps_q) +
                                  " (use BLOCK_Q=" + std::to_string(8 * c.warps_q) + ", or MMA=0 for more queries)");
    }
    // the wgmma main loop's rules (TopkTraits' static_asserts; BLOCK_N % (64 x warpgroups) is BLOCK_N % (16 x WARPS_N),
    // checked above)
    if (tunelab::sim::topk_uses_wgmma(c.mma)) {
        const std::string why = "MMA=" + std::to_string(c.mma) + " (wgmma warpgroup tiles) needs ";
        if (dtype == 2) config_error(fam, why + "fp16 or bf16 inputs; fp32 runs on MMA=0 (3xTF32) or 4 (FFMA)");
        if (row_bytes != 128)
            config_error(fam, why + "128-byte row slices (BLOCK_K=64 for 16-bit inputs), the SWIZZLE_128B atom; BLOCK_K=" +
                         std::to_string(c.block_k) + " gives " + std::to_string(row_bytes));
        if (c.warps_q != 1 || (c.warps_n != 4 && c.warps_n != 8))
            config_error(fam, why + "WARPS_Q=1 and WARPS_N 4 or 8 (one or two warpgroups along the corpus rows); got WARPS_N=" +
                         std::to_string(c.warps_n) + ", WARPS_Q=" + std::to_string(c.warps_q));
        if (c.mma == 1 && c.stages < 3)
            config_error(fam, why + "STAGES >= 3 (one slice stays in flight on the tensor cores); got STAGES=" +
                         std::to_string(c.stages));
        if (c.mma >= 2 && c.min_blocks != 1)
            config_error(fam, why + "MIN_BLOCKS=1: it is built for one block per SM (with 8 MMA warps they take the "
                                    "producer warpgroup's registers, setmaxnreg); got MIN_BLOCKS=" +
                                    std::to_string(c.min_blocks));
        if (c.mma == 3 && c.warps_n != 8)
            config_error(fam, "MMA=3 (ping-pong warpgroups) needs WARPS_N=8: two MMA warpgroups that take turns on "
                              "the tiles; got WARPS_N=" + std::to_string(c.warps_n) + " (use MMA=2 for one warpgroup)");
        if (c.mma == 3 && c.merge < 3)
            config_error(fam, "MMA=3 (ping-pong warpgroups) needs thread lists (MERGE 3 or 4) or no lists (MERGE 5, "
                              "6, 7): each warpgroup keeps its own; got MERGE=" + std::to_string(c.merge) +
                              " (use MMA=2 for MERGE 0..2)");
    }
    if (tunelab::sim::topk_filter_warps(c.merge) && !tunelab::sim::topk_uses_tma(c.mma))
        config_error(fam, "MERGE=7 (keys filtered by the producer warpgroup's spare warps) needs the TMA producer, MMA "
                          "2 or 3; got MMA=" + std::to_string(c.mma) + ": use MERGE=6 (filtered by the MMA warps)");
    // options of the TMA producer: anything but their off value needs MMA 2 or 3
    auto needs_tma = [&](bool ok, const char* name, int value, const char* what, int off) {
        if (!ok)
            config_error(fam, std::string(name) + "=" + std::to_string(value) + " (" + what + ") needs the TMA "
                              "producer, MMA 2 or 3; got MMA=" + std::to_string(c.mma) + ": use " + name + "=" +
                              std::to_string(off));
    };
    needs_tma(tunelab::sim::topk_cluster_ok(c.cluster, c.mma), "CLUSTER", c.cluster,
              "blocks sharing query slices by TMA multicast", 1);
    needs_tma(tunelab::sim::topk_prefetch_ok(c.prefetch, c.mma), "PREFETCH", c.prefetch,
              "L2 prefetch of later corpus tiles by TMA", 0);
    return c;
}

void topk_check_k(const TopkConfig& c, long long k) {
    if (!tunelab::sim::topk_keeps_lists(c.merge) && k > tunelab::sim::kSelectMaxK)
        config_error("similarity",
                     "MERGE=" + std::to_string(c.merge) + " (" +
                         (tunelab::sim::topk_dense(c.merge) ? "dense key matrix" : "filtered candidates") +
                         ") is followed by the select kernel, which takes k <= " +
                         std::to_string(tunelab::sim::kSelectMaxK) + "; k=" + std::to_string(k) + " needs MERGE 0..4");
    const int cap = tunelab::sim::thread_list_capacity(c.merge);
    if (cap > 0 && k > cap)
        config_error("similarity", "MERGE=" + std::to_string(c.merge) + " keeps at most " + std::to_string(cap) +
                              " entries per thread list; k=" + std::to_string(k) + " needs " +
                              (k <= 32 ? "MERGE=4 (k <= 32) or " : "") + "MERGE 0..2");
}

long long topk_static_smem_bytes(const Config& config, int dtype, int metric) {
    const TopkConfig c = topk_validate(config, dtype, metric);
    // Mirrors TopkTraits: pipeline ring, score tile (thread lists: also the candidate queues), per-warp scratch
    // lists (not with thread lists), row norms (cosine, l2), per-query {len, sel, thr_key, thr_idx} and the
    // pre-check's hit flags [WARPS_N][BLOCK_Q] (thread lists: each part's k-th key). Ping-pong (MMA=3) has a score
    // tile and row norms per warpgroup; a cluster's stages hold topk_query_rows() query rows. MERGE=5 (dense) has
    // the ring and the row norms only; MERGE=6 (filtered) also the filter region (per group and query column,
    // topk_filter_pitch() words) in the score tile's place; MERGE=7 one score tile for the block with the filter
    // warps' words and mbarriers (topk_filter_tile_bytes()).
    const bool thread_lists = tunelab::sim::topk_thread_lists(c.merge);
    const bool no_lists = !tunelab::sim::topk_keeps_lists(c.merge);
    const long long row_bytes = static_cast<long long>(c.block_k) * element_bytes(dtype);
    const long long stage = (c.block_n + tunelab::sim::topk_query_rows(c.block_q, c.cluster)) * row_bytes;
    const long long epi = c.epi_rows();
    const long long groups = tunelab::sim::topk_tile_groups(c.mma);
    const int group_warps = c.warps_n * c.warps_q / static_cast<int>(groups);
    const long long score =
        tunelab::sim::topk_filter_warps(c.merge) ? tunelab::sim::topk_filter_tile_bytes(c.block_q, c.block_n)
        : tunelab::sim::topk_candidate_rows(c.merge)
            ? groups * c.block_q * tunelab::sim::topk_filter_pitch(group_warps, c.warps_q) * 4LL
            : no_lists ? 0 : groups * c.block_q * (epi + 4) * 4;
    const long long scratch = thread_lists || no_lists ? 0 : static_cast<long long>(c.warps_n * c.warps_q) * epi * 8;
    const long long norms = metric != 0 ? groups * c.block_n * 4LL : 0;
    const long long meta = no_lists       ? 0
                           : thread_lists ? tunelab::sim::topk_list_parts(c.threads(), c.block_q, c.mma) * c.block_q * 4LL
                                          : c.block_q * 16LL + c.warps_n * c.block_q * 4LL;
    return c.stages * stage + score + scratch + norms + meta + tunelab::sim::topk_mbarrier_bytes(c.mma, c.stages);
}

long long topk_smem_bytes(const Config& config, int dtype, int metric, int k) {
    if (k < 1) throw InputError("k=" + std::to_string(k) + " must be >= 1");
    const TopkConfig c = topk_validate(config, dtype, metric);
    topk_check_k(c, k);
    return topk_static_smem_bytes(config, dtype, metric) +
           tunelab::sim::topk_list_bytes(c.merge, c.threads(), c.block_q, k, c.mma);
}

int topk_threads(const Config& config) {
    auto v = topk_values(config);
    return tunelab::sim::topk_launch_threads(v["WARPS_N"] * v["WARPS_Q"], v["MMA"]);
}

std::string topk_name_expression(const Config& config, int dtype, int metric) {
    const TopkConfig c = topk_validate(config, dtype, metric);
    std::ostringstream s;
    s << "tunelab::sim::similarity_topk<tunelab::sim::TopkTraits<" << dtype << ", " << metric << ", " << c.block_n
      << ", " << c.block_q << ", " << c.block_k << ", " << c.warps_n << ", " << c.warps_q << ", " << c.stages << ", "
      << c.vec << ", " << c.merge << ", " << c.epi_rows_param << ", " << c.min_blocks << ", " << c.mma << ", "
      << c.cluster << ", " << c.prefetch << ">>";
    return s.str();
}

TopkPlan topk_plan(const Config& config, long long nq, long long n, long long target_blocks, long long max_splits) {
    auto v = topk_values(config);
    if (nq < 1) throw InputError("nq=" + std::to_string(nq) + " queries; at least one is needed");
    if (n < 1) throw InputError("n=" + std::to_string(n) + " corpus rows; at least one is needed");
    if (n > INT_MAX) throw InputError("a corpus chunk of " + std::to_string(n) + " rows exceeds 2^31 - 1 rows");
    const long long bn = v["BLOCK_N"], bq = v["BLOCK_Q"];
    TopkPlan p{};
    const long long q_tiles = (nq + bq - 1) / bq;
    if (q_tiles > INT_MAX) throw InputError("too many queries: " + std::to_string(nq));
    p.q_tiles = static_cast<int>(q_tiles);
    const long long tiles = (n + bn - 1) / bn;
    p.num_tiles = static_cast<int>(tiles);
    // Every split is a contiguous run of equal length; the grid runs in waves of target_blocks resident blocks, so
    // the time goes as waves x tiles per split. Choose the split count (up to 4 waves) that minimizes that
    // product, the fewest splits on ties (each split costs a candidate list and a cold first tile). Rounding
    // q_tiles * splits up past one wave would leave a second wave almost empty: 8 query tiles x 17 splits on
    // 132 SMs ran 136 blocks in twice the time of 128.
    // With clusters (CLUSTER blocks along the splits) the split count is a multiple of CLUSTER: the last cluster's
    // blocks past the corpus walk empty tiles (SearchParams).
    const long long cl = v["CLUSTER"];
    long long cap = std::min(tiles, 65535LL);  // grid dimension y
    if (max_splits > 0) cap = std::min(cap, max_splits);
    cap = std::max(cl, cap / cl * cl);  // whole clusters
    long long splits = cl;
    if (target_blocks > 0) {
        long long best = -1;
        const long long hi = std::min(cap, std::max(cl, (4 * target_blocks) / q_tiles));
        for (long long s = cl; s <= hi; s += cl) {
            const long long waves = (q_tiles * s + target_blocks - 1) / target_blocks;
            const long long cost = waves * ((tiles + s - 1) / s);
            if (best < 0 || cost < best) {
                best = cost;
                splits = s;
            }
        }
    }
    const long long per = (tiles + splits - 1) / splits;
    p.tiles_per_split = static_cast<int>(per);
    p.splits = static_cast<int>(tunelab::sim::topk_splits(tiles, per, cl));
    return p;
}

int max_vec(int dtype, const std::vector<unsigned long long>& pointers, const std::vector<long long>& strides,
            long long d) {
    return widest_copy(element_bytes(dtype), pointers, strides, d);
}

std::string topk_pack(const Config& config, int dtype, unsigned long long queries, unsigned long long corpus,
                      unsigned long long cand_key, unsigned long long cand_idx, long long q_stride, long long c_stride,
                      long long index_base, long long nq, long long n, long long d, long long k, int num_tiles,
                      int tiles_per_split, int list_offset, long long dense_ld) {
    const TopkConfig c = topk_validate(config, dtype, 0);
    const bool no_lists = !tunelab::sim::topk_keeps_lists(c.merge);
    const bool filtered = tunelab::sim::topk_candidate_rows(c.merge);
    topk_check_k(c, k);
    if (nq < 1 || nq > INT_MAX) throw InputError("nq=" + std::to_string(nq) + " must be in 1..2^31-1");
    if (n < 1 || n > INT_MAX) throw InputError("n=" + std::to_string(n) + " must be in 1..2^31-1");
    if (d < 1 || d > INT_MAX / 4) throw InputError("d=" + std::to_string(d) + " must be in 1..2^29");
    if (k < 1 || k > INT_MAX / 8)
        throw InputError("k=" + std::to_string(k) + " must be in 1.." + std::to_string(INT_MAX / 8));
    if (index_base < 0 || index_base + n > INT_MAX)
        throw InputError("corpus rows up to " + std::to_string(index_base + n) +
                         " exceed 2^31 - 1: indices are 32-bit inside the kernels; split the corpus");
    if (q_stride < d || c_stride < d)
        throw InputError("row strides (queries " + std::to_string(q_stride) + ", corpus " + std::to_string(c_stride) +
                         " elements) must be >= d=" + std::to_string(d));
    if (no_lists) {  // MERGE=5: cand_key is the [nq][dense_ld] key matrix (chunk-local columns), cand_idx unused;
                     // MERGE=6: cand_key / cand_idx are [nq][dense_ld] candidate rows (a segment per split, then
                     // the segments' counts in cand_idx)
        const std::string m = "MERGE=" + std::to_string(c.merge);
        null_check({{"queries", queries}, {"corpus", corpus}, {"cand_key (the key matrix)", cand_key}});
        if (filtered) null_check({{"cand_idx (the candidate rows)", cand_idx}});
        constexpr int align = tunelab::sim::kDenseLdAlign;
        // MERGE=6: the launch's splits, as topk_plan() makes them (the grid's y)
        const long long tps = std::max(1, tiles_per_split);
        const long long splits = tunelab::sim::topk_splits(num_tiles, tps, c.cluster);
        const long long need = filtered ? tunelab::sim::topk_filter_ld(splits, tps * c.block_n) : n;
        if (dense_ld < need || dense_ld % align != 0 || dense_ld > INT_MAX)
            throw InputError(m + ": the " + (filtered ? "candidate rows'" : "key matrix's") + " row stride dense_ld=" +
                             std::to_string(dense_ld) + " must be a multiple of " + std::to_string(align) +
                             " floats, at least " + std::to_string(need) + " (16-byte rows for the select kernel's "
                             "copies" + (filtered ? "; " + std::to_string(splits) + " segments of " +
                                                         std::to_string(tps * c.block_n) + " rows and their counts"
                                                   : std::string()) +
                             ") and at most 2^31-1: allocate the rows with CompiledSearch.candidate_buffers()");
        if (cand_key % 16)
            throw InputError(m + ": the key matrix must be 16-byte aligned (it is at byte " +
                             std::to_string(cand_key % 16) + " of 16)");
        if (index_base != 0 || list_offset != 0)
            throw InputError(m + " writes one corpus's keys (index_base=" + std::to_string(index_base) +
                             ", list_offset=" + std::to_string(list_offset) + " must be 0): streamed corpora take "
                             "MERGE 0..4");
    } else {
        null_check({{"queries", queries}, {"corpus", corpus}, {"cand_key", cand_key}, {"cand_idx", cand_idx}});
    }
    const int allowed = max_vec(dtype, {queries, corpus}, {q_stride, c_stride}, d);
    if (allowed < c.vec)
        throw InputError("VEC=" + std::to_string(c.vec) + " bytes needs the query and corpus pointers, row strides and d * " +
                         std::to_string(element_bytes(dtype)) + " bytes to be multiples of " + std::to_string(c.vec) +
                         "; these inputs allow VEC <= " + std::to_string(allowed) +
                         (allowed ? "" : " (none: make d even and the tensors contiguous)"));
    if (cand_key % 4 || cand_idx % 4)
        throw InputError("candidate buffers (keys at byte " + std::to_string(cand_key % 4) + ", indices at byte " +
                         std::to_string(cand_idx % 4) + " of a 4-byte word) must be 4-byte aligned: pass float32/int32 "
                         "tensors");
    tunelab::sim::SearchParams p{};
    if (tunelab::sim::topk_uses_tma(c.mma)) {  // TMA boxes: one slice of BLOCK_Q query rows / BLOCK_N corpus rows
        const int eb = element_bytes(dtype);
        const int tma_vec = max_vec(dtype, {queries, corpus}, {q_stride, c_stride}, 0);
        if (tma_vec < 16)
            throw InputError("MMA=" + std::to_string(c.mma) +
                             " (TMA copies) needs 16-byte aligned query and corpus pointers and row strides (for "
                             "contiguous 16-bit rows: d a multiple of 8); these inputs allow " +
                             std::to_string(tma_vec) + "-byte copies: use MMA=1 (STAGES >= 3) or MMA=0");
        // clusters: each block's part of the (padded) query tile, whole 8-row atoms
        const int q_box = tunelab::sim::topk_query_rows(c.block_q, c.cluster) / c.cluster;
        const auto tq = encode_tma_2d_16bit("the queries", queries, dtype == 1, nq, d, q_stride * eb, q_box,
                                            c.block_k);
        const auto tc = encode_tma_2d_16bit("the corpus", corpus, dtype == 1, n, d, c_stride * eb, c.block_n,
                                            c.block_k);
        std::memcpy(p.tma_queries, tq.data(), sizeof p.tma_queries);
        std::memcpy(p.tma_corpus, tc.data(), sizeof p.tma_corpus);
    }
    p.queries = reinterpret_cast<const void*>(queries);
    p.corpus = reinterpret_cast<const void*>(corpus);
    p.cand_key = reinterpret_cast<float*>(cand_key);
    p.cand_idx = reinterpret_cast<int*>(cand_idx);
    p.q_stride = q_stride;
    p.c_stride = c_stride;
    p.index_base = index_base;
    p.nq = static_cast<int>(nq);
    p.n = static_cast<int>(n);
    p.d = static_cast<int>(d);
    p.k = static_cast<int>(k);
    p.num_tiles = num_tiles;
    p.tiles_per_split = tiles_per_split;
    p.list_offset = list_offset;
    p.dense_ld = no_lists ? static_cast<int>(dense_ld) : 0;
    // clusters walk tiles_per_split tiles per block, past num_tiles in the last cluster: their rows must fit int32
    if (c.cluster > 1 &&
        (static_cast<long long>(num_tiles) + static_cast<long long>(c.cluster) * tiles_per_split) * c.block_n > INT_MAX)
        throw InputError("n=" + std::to_string(n) + " with CLUSTER=" + std::to_string(c.cluster) +
                         " walks corpus rows past 2^31 - 1; use CLUSTER=1 or split the corpus");
    return param_bytes(p);
}

// ------------------------------------------------------------------------------------------------ merge

int merge_kind(long long k, long long candidates, bool sorted_lists) {
    if (k < 1) throw InputError("k=" + std::to_string(k) + " must be >= 1");
    if (candidates < 1) throw InputError("candidates=" + std::to_string(candidates) + " per query must be >= 1");
    return tunelab::sim::merge_kind(static_cast<int>(std::min<long long>(k, INT_MAX)), candidates, sorted_lists);
}

namespace {
void check_merge_kind(int kind) {
    if (kind < 0 || kind >= tunelab::sim::kMergeKinds)
        throw ConfigError("merge kind " + std::to_string(kind) +
                          " is not 0 (thread lists, k <= 16), 1 (thread lists, k <= 32), 2 (8 warps), 3 (4 warps), "
                          "4 (sorted lists, k <= 32), 5 (select: a dense key matrix, k <= 32) or 6 (select: a "
                          "filtered search's candidate rows, k <= 32)");
}
}  // namespace

int merge_threads(int kind) {
    check_merge_kind(kind);
    return 32 * tunelab::sim::merge_kind_warps(kind);
}

long long merge_smem_bytes(int kind, int k) {
    check_merge_kind(kind);
    if (k < 1) throw InputError("k=" + std::to_string(k) + " must be >= 1");
    const int cap = tunelab::sim::merge_kind_max_k(kind);
    if (cap > 0 && k > cap)
        throw ConfigError("merge kind " + std::to_string(kind) + " takes k <= " + std::to_string(cap) + "; k=" +
                          std::to_string(k) + " needs kind " +
                          (k <= 32 ? "1, 2, 3, (sorted lists) 4, (dense rows) 5 or (filtered rows) 6" : "2 or 3") +
                          ": pass no kind to let merge_kind() choose");
    return tunelab::sim::merge_smem_bytes(kind, k);
}

std::string merge_name_expression(int dtype, int metric, int kind) {
    if (dtype < 0 || dtype > 2) throw ConfigError("merge: dtype code " + std::to_string(dtype) + " is not 0..2");
    if (metric < 0 || metric > 2) throw ConfigError("merge: metric code " + std::to_string(metric) + " is not 0..2");
    check_merge_kind(kind);
    if (kind == tunelab::sim::kMergeSelect)
        return "tunelab::sim::similarity_select<" + std::to_string(dtype) + ", " + std::to_string(metric) + ">";
    if (kind == tunelab::sim::kMergeFilterSelect)
        return "tunelab::sim::similarity_select_filtered<" + std::to_string(dtype) + ", " + std::to_string(metric) +
               ">";
    const std::string args = std::to_string(dtype) + ", " + std::to_string(metric) + ", ";
    if (kind == tunelab::sim::kMergeSorted)
        return "tunelab::sim::similarity_merge_sorted<" + std::to_string(dtype) + ", " + std::to_string(metric) + ">";
    if (const int cap = tunelab::sim::merge_kind_capacity(kind))
        return "tunelab::sim::similarity_merge_lists<" + args + std::to_string(cap) + ">";
    return "tunelab::sim::similarity_merge<" + args + std::to_string(tunelab::sim::merge_kind_warps(kind)) + ">";
}

std::string merge_pack(unsigned long long cand_key, unsigned long long cand_idx, unsigned long long queries,
                       long long q_stride, unsigned long long out_key, unsigned long long out_idx,
                       unsigned long long out_score, unsigned long long out_index, long long nq, long long d,
                       long long k, long long num_lists, long long list_len, long long list_stride,
                       long long query_stride, bool implicit_index, bool filtered_rows) {
    if (nq < 1 || nq > INT_MAX) throw InputError("nq=" + std::to_string(nq) + " must be in 1..2^31-1");
    if (k < 1 || k > INT_MAX / 8)
        throw InputError("k=" + std::to_string(k) + " must be in 1.." + std::to_string(INT_MAX / 8));
    if (list_len <= 0) {  // the search's candidate lists
        list_len = k;
        list_stride = nq * k;
        query_stride = k;
    }
    if (num_lists < 1 || num_lists * list_len > INT_MAX)
        throw InputError("num_lists=" + std::to_string(num_lists) + " x list_len=" + std::to_string(list_len) +
                         " must be in 1..2^31-1");
    if (query_stride < list_len)  // query q's list holds entries q * query_stride + 0 .. list_len - 1
        throw InputError("query_stride=" + std::to_string(query_stride) + " is shorter than list_len=" +
                         std::to_string(list_len) + ": each query's list would overlap the next query's; pass the "
                         "row stride of the score matrix (for a MERGE=5 key matrix, dense_ld(N))");
    if ((out_key == 0) != (out_idx == 0) || (out_score == 0) != (out_index == 0))
        throw InputError("merge outputs come in pairs: (key, idx) and (score, index)");
    null_check({{"cand_key", cand_key}});
    if (!implicit_index) null_check({{"cand_idx", cand_idx}});
    if (filtered_rows) {  // the select after a MERGE=6 search: num_lists segments of list_len entries, their counts
        if (implicit_index)
            throw InputError("filtered_rows (the candidate rows of a MERGE=6 search) have explicit indices: pass "
                             "cand_idx and implicit_index=False");
        const long long need = tunelab::sim::topk_filter_ld(num_lists, list_len);
        if (query_stride < need || need > INT_MAX)
            throw InputError("filtered_rows: query_stride=" + std::to_string(query_stride) + " must be at least " +
                             std::to_string(need) + " (" + std::to_string(num_lists) + " segments of " +
                             std::to_string(list_len) + " entries, then their counts), which must be at most "
                             "2^31-1: allocate the rows with CompiledSearch.candidate_buffers()");
    }
    tunelab::sim::MergeParams p{};
    p.cand_key = reinterpret_cast<const float*>(cand_key);
    p.cand_idx = reinterpret_cast<const int*>(cand_idx);
    p.queries = reinterpret_cast<const void*>(queries);
    p.out_key = reinterpret_cast<float*>(out_key);
    p.out_idx = reinterpret_cast<int*>(out_idx);
    p.out_score = reinterpret_cast<float*>(out_score);
    p.out_index = reinterpret_cast<long long*>(out_index);
    p.q_stride = q_stride;
    p.nq = static_cast<int>(nq);
    p.d = static_cast<int>(d);
    p.k = static_cast<int>(k);
    p.num_lists = static_cast<int>(num_lists);
    p.list_len = static_cast<int>(list_len);
    p.list_stride = list_stride;
    p.query_stride = query_stride;
    p.implicit_index = implicit_index ? 1 : 0;
    return param_bytes(p);
}

// ------------------------------------------------------------------------------------------------ Gram

const std::vector<std::string>& gram_param_names() {
    static const std::vector<std::string> names = {"TILE_M", "TILE_N", "TILE_K", "WARPS_M", "WARPS_N", "STAGES", "VEC"};
    return names;
}

const std::map<std::string, std::vector<long long>>& gram_param_choices() {
    static const std::map<std::string, std::vector<long long>> choices = {
        {"TILE_M", {32, 64, 128}},      // rows i per block
        {"TILE_N", {32, 64, 128}},      // rows j per block
        {"TILE_K", {16, 32, 64, 128}},  // real scalars per pipeline slice (x element bytes: 64..256 B)
        {"WARPS_M", {1, 2, 4}},
        {"WARPS_N", {1, 2, 4}},
        {"STAGES", {2, 3, 4}},
        {"VEC", {4, 8, 16}},
    };
    return choices;
}

GramConfig gram_validate(const Config& config, int dtype, bool symmetric) {
    const char* fam = "gram";
    auto v = checked(fam, config, gram_param_names(), gram_param_choices());
    GramConfig c{v["TILE_M"], v["TILE_N"], v["TILE_K"], v["WARPS_M"], v["WARPS_N"], v["STAGES"], v["VEC"]};
    const int row_bytes = c.tile_k * element_bytes(dtype);
    if (row_bytes != 64 && row_bytes != 128 && row_bytes != 256)
        config_error(fam, "TILE_K=" + std::to_string(c.tile_k) + " x " + std::to_string(element_bytes(dtype)) + " bytes (" +
                     dtype_name(dtype) + ") = " + std::to_string(row_bytes) + " bytes; it must be 64, 128 or 256");
    if (c.tile_m % (16 * c.warps_m) != 0)
        config_error(fam, "TILE_M=" + std::to_string(c.tile_m) + " is not a multiple of 16 * WARPS_M=" +
                     std::to_string(16 * c.warps_m));
    if (c.tile_n % (8 * c.warps_n) != 0)
        config_error(fam, "TILE_N=" + std::to_string(c.tile_n) + " is not a multiple of 8 * WARPS_N=" +
                     std::to_string(8 * c.warps_n));
    if (symmetric && c.tile_m != c.tile_n)
        config_error(fam, "symmetric mode needs TILE_M == TILE_N (got " + std::to_string(c.tile_m) + " and " +
                     std::to_string(c.tile_n) + ")");
    return c;
}

long long gram_smem_bytes(const Config& config, int dtype) {
    const GramConfig c = gram_validate(config, dtype, false);
    return static_cast<long long>(c.stages) * (c.tile_m + c.tile_n) * c.tile_k * element_bytes(dtype);
}

int gram_threads(const Config& config) {
    auto v = checked("gram", config, gram_param_names(), gram_param_choices());
    return 32 * v["WARPS_M"] * v["WARPS_N"];
}

std::string gram_name_expression(const Config& config, int dtype, bool symmetric, bool mirror, int epilogue) {
    const GramConfig c = gram_validate(config, dtype, symmetric);
    if (mirror && !symmetric) throw ConfigError("gram: mirror applies to symmetric mode only");
    if (epilogue != 0 && (epilogue != 1 || dtype == 3 || symmetric))
        throw ConfigError("gram: epilogue " + std::to_string(epilogue) +
                          " is not 0 (|.|^2) or 1 (plain product, real dtypes, non-symmetric)");
    std::ostringstream s;
    s << "tunelab::sim::similarity_gram<tunelab::sim::GramTraits<" << dtype << ", " << c.tile_m << ", " << c.tile_n
      << ", " << c.tile_k << ", " << c.warps_m << ", " << c.warps_n << ", " << c.stages << ", " << c.vec << ", "
      << (symmetric ? 1 : 0) << ", " << (mirror ? 1 : 0) << ", " << epilogue << ">>";
    return s.str();
}

std::array<unsigned, 3> gram_grid(const Config& config, long long m, long long n, bool symmetric) {
    auto v = checked("gram", config, gram_param_names(), gram_param_choices());
    if (n < 1 || n > INT_MAX || m < 1 || m > INT_MAX)
        throw InputError("m=" + std::to_string(m) + ", n=" + std::to_string(n) + " rows must be in 1..2^31-1");
    if (symmetric && m != n)
        throw InputError("symmetric mode needs m == n (got m=" + std::to_string(m) + ", n=" + std::to_string(n) +
                         "): it computes one set of states against itself");
    const long long tm = v["TILE_M"], tn = v["TILE_N"];
    if (symmetric) {
        const long long t = (n + tm - 1) / tm;
        const long long pairs = t * (t + 1) / 2;
        if (pairs > INT_MAX) throw InputError("n=" + std::to_string(n) + " gives too many tiles for one launch");
        return {static_cast<unsigned>(pairs), 1u, 1u};
    }
    const long long gx = (n + tn - 1) / tn, gy = (m + tm - 1) / tm;
    if (gy > 65535) throw InputError("m=" + std::to_string(m) + " needs " + std::to_string(gy) +
                                     " row tiles; the grid's y dimension allows 65535: use symmetric mode or a larger TILE_M");
    return {static_cast<unsigned>(gx), static_cast<unsigned>(gy), 1u};
}

std::string gram_pack(const Config& config, int dtype, bool symmetric, unsigned long long x, unsigned long long y,
                      unsigned long long out, long long x_stride, long long y_stride, long long out_stride, long long m,
                      long long n, long long d) {
    const GramConfig c = gram_validate(config, dtype, symmetric);
    if (n < 1 || n > INT_MAX || m < 1 || m > INT_MAX)
        throw InputError("m=" + std::to_string(m) + ", n=" + std::to_string(n) + " rows must be in 1..2^31-1");
    if (symmetric && (m != n || x != y || x_stride != y_stride))
        throw InputError("symmetric mode is for one set of states (x == y, m == n)");
    if (d < 1 || d > INT_MAX / 4)
        throw InputError("state dimension " + std::to_string(d) + " scalars is outside 1.." + std::to_string(INT_MAX / 4));
    if (x_stride < d || y_stride < d)
        throw InputError("row strides " + std::to_string(x_stride) + ", " + std::to_string(y_stride) + " < d=" +
                         std::to_string(d));
    if (out_stride < n) throw InputError("output row stride " + std::to_string(out_stride) + " < n=" + std::to_string(n));
    null_check({{"x", x}, {"y", y}, {"out", out}});
    if (out % 4) throw InputError("the output must be 4-byte aligned: pass a float32 tensor");
    const int allowed = max_vec(dtype == 3 ? 2 : dtype, {x, y}, {x_stride, y_stride}, d);
    if (allowed < c.vec)
        throw InputError("VEC=" + std::to_string(c.vec) + " bytes needs the states' pointer, row stride and row size to "
                         "be multiples of " + std::to_string(c.vec) + " bytes; these allow VEC <= " +
                         std::to_string(allowed));
    tunelab::sim::GramParams p{};
    p.x = reinterpret_cast<const void*>(x);
    p.y = reinterpret_cast<const void*>(y);
    p.out = reinterpret_cast<float*>(out);
    p.x_stride = x_stride;
    p.y_stride = y_stride;
    p.out_stride = out_stride;
    p.m = static_cast<int>(m);
    p.n = static_cast<int>(n);
    p.d = static_cast<int>(d);
    p.tiles = static_cast<int>(symmetric ? (n + c.tile_m - 1) / c.tile_m : (n + c.tile_n - 1) / c.tile_n);
    return param_bytes(p);
}

}  // namespace tunelab::launchers::similarity
