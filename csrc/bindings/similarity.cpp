// tunelab._core.similarity: thin bindings of csrc/launchers/similarity.{h,cpp}.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "bindings/registry.h"
#include "kernels/similarity/params.cuh"
#include "launchers/similarity.h"

namespace py = pybind11;
namespace sl = tunelab::launchers::similarity;

namespace tunelab::bindings {

void bind_similarity(py::module_& m) {
    py::module_ s = m.def_submodule("similarity", "Launchers of the similarity-search and Gram kernel family.");

    s.def("element_bytes", &sl::element_bytes, py::arg("dtype"));
    s.def("max_vec", &sl::max_vec, py::arg("dtype"), py::arg("pointers"), py::arg("strides"), py::arg("d"),
          "Largest cp.async width (16, 8, 4) the pointers, row strides (elements) and d allow; 0 if none.");

    // top-k search
    s.def("topk_param_names", &sl::topk_param_names, "Search tunables in template order.");
    s.def("topk_param_choices", &sl::topk_param_choices, "Values each search tunable accepts on its own.");
    s.def("topk_param_defaults", &sl::topk_param_defaults,
          "Values of the search tunables a config may leave out (configs written before they existed).");
    s.def("topk_validate", [](const sl::Config& c, int dtype, int metric) { sl::topk_validate(c, dtype, metric); },
          py::arg("config"), py::arg("dtype"), py::arg("metric"),
          "Raise ConfigError naming the broken rule for a config the kernel cannot instantiate.");
    s.def(
        "topk_config_error",
        [](const sl::Config& c, int dtype, int metric) -> std::string {
            try {
                sl::topk_validate(c, dtype, metric);
            } catch (const tunelab::ConfigError& e) {
                return e.what();
            }
            return "";
        },
        py::arg("config"), py::arg("dtype"), py::arg("metric"),
        "topk_validate's message for a config the kernel cannot instantiate, '' for a valid one (no exception: "
        "for checking whole search spaces).");
    s.def("topk_static_smem_bytes", &sl::topk_static_smem_bytes, py::arg("config"), py::arg("dtype"),
          py::arg("metric"));
    s.def("topk_smem_bytes", &sl::topk_smem_bytes, py::arg("config"), py::arg("dtype"), py::arg("metric"), py::arg("k"),
          "Dynamic shared memory of the search kernel for k (the kernel has no static shared memory).");
    s.def("topk_threads", &sl::topk_threads, py::arg("config"), "Threads per search block at launch.");
    s.def("thread_list_capacity", &tunelab::sim::thread_list_capacity, py::arg("merge"),
          "Entries of a search thread list for MERGE (3: 16, 4: 32; 0 for the shared lists): k must not exceed it.");
    s.def("topk_thread_lists", &tunelab::sim::topk_thread_lists, py::arg("merge"),
          "Whether MERGE keeps thread lists (3, 4).");
    s.def("topk_uses_tma", &tunelab::sim::topk_uses_tma, py::arg("mma"),
          "Whether main loop MMA is fed by the TMA producer warpgroup (MMA 2, 3).");
    s.def("topk_uses_wgmma", &tunelab::sim::topk_uses_wgmma, py::arg("mma"),
          "Whether main loop MMA runs wgmma warpgroup tiles (MMA 1, 2, 3; sm_90 only).");
    s.def("topk_uses_fma", &tunelab::sim::topk_uses_fma, py::arg("mma"),
          "Whether main loop MMA computes fp32 products on the CUDA cores (MMA=4: FFMA, fp32 inputs).");
    s.def("topk_tile_groups", &tunelab::sim::topk_tile_groups, py::arg("mma"),
          "Groups of MMA warps that run tiles of their own: 2 for ping-pong (MMA=3), else 1.");
    s.def("topk_query_rows", &tunelab::sim::topk_query_rows, py::arg("block_q"), py::arg("cluster"),
          "Query rows of a search stage: BLOCK_Q, with CLUSTER > 1 rounded up to 8 rows per cluster block.");
    s.def("topk_name_expression", &sl::topk_name_expression, py::arg("config"), py::arg("dtype"), py::arg("metric"));
    s.def(
        "topk_plan",
        [](const sl::Config& c, long long nq, long long n, long long target_blocks, long long max_splits) {
            const sl::TopkPlan p = sl::topk_plan(c, nq, n, target_blocks, max_splits);
            py::dict d;
            d["q_tiles"] = p.q_tiles;
            d["num_tiles"] = p.num_tiles;
            d["tiles_per_split"] = p.tiles_per_split;
            d["splits"] = p.splits;
            return d;
        },
        py::arg("config"), py::arg("nq"), py::arg("n"), py::arg("target_blocks"), py::arg("max_splits") = 0);
    s.def(
        "topk_pack",
        [](const sl::Config& c, int dtype, unsigned long long q, unsigned long long corpus, unsigned long long ck,
           unsigned long long ci, long long qs, long long cs, long long base, long long nq, long long n, long long d,
           long long k, int num_tiles, int tiles_per_split, int list_offset, long long dense_ld) {
            return py::bytes(sl::topk_pack(c, dtype, q, corpus, ck, ci, qs, cs, base, nq, n, d, k, num_tiles,
                                           tiles_per_split, list_offset, dense_ld));
        },
        py::arg("config"), py::arg("dtype"), py::arg("queries"), py::arg("corpus"), py::arg("cand_key"),
        py::arg("cand_idx"), py::arg("q_stride"), py::arg("c_stride"), py::arg("index_base"), py::arg("nq"),
        py::arg("n"), py::arg("d"), py::arg("k"), py::arg("num_tiles"), py::arg("tiles_per_split"),
        py::arg("list_offset"), py::arg("dense_ld") = 0,
        "SearchParams bytes (pass to ArgPack.raw(bytes, 8)). MERGE=5: cand_key is the [nq][dense_ld] key matrix; "
        "MERGE=6: cand_key / cand_idx the [nq][dense_ld] candidate rows, dense_ld >= filter_ld(splits, rows per "
        "split).");

    // merge
    {
        namespace ts = tunelab::sim;
        py::tuple kinds(ts::kMergeKinds);
        for (int i = 0; i < ts::kMergeKinds; ++i) kinds[i] = i;
        s.attr("MERGE_KINDS") = kinds;
        s.attr("MERGE_SORTED") = static_cast<int>(ts::kMergeSorted);
        s.attr("MERGE_SELECT") = static_cast<int>(ts::kMergeSelect);
        s.attr("MERGE_DENSE") = static_cast<int>(ts::kMergeDense);  // the search's MERGE value that writes the keys
        s.attr("MERGE_FILTERED") = static_cast<int>(ts::kMergeFiltered);  // ... that writes the keys that reach a bar
        s.attr("MERGE_FILTER_WARPS") = static_cast<int>(ts::kMergeFilterWarps);  // ... the same, by spare warps
        s.attr("MERGE_FILTER_SELECT") = static_cast<int>(ts::kMergeFilterSelect);
        s.attr("SELECT_MAX_K") = static_cast<int>(ts::kSelectMaxK);
        s.attr("FILTER_WORDS") = static_cast<int>(ts::kFilterWords);  // MERGE=6's global words per query
        // the diagnosis build's timeline slots (params.cuh), for benchmarks/similarity_probe.py --trace
        py::dict slots;
        for (auto [name, v] : {std::pair{"slots", ts::kTraceSlots}, {"entry", ts::kTraceEntry},
                               {"producer_start", ts::kTraceProducerStart}, {"producer_done", ts::kTraceProducerDone},
                               {"mma_start", ts::kTraceMmaStart}, {"smid", ts::kTraceSmid}, {"turn0", ts::kTraceTurn0},
                               {"turns", ts::kTraceTurns}, {"end_barrier", ts::kTraceEndBarrier},
                               {"done", ts::kTraceDone}, {"scan", ts::kTraceScan}, {"why", ts::kTraceWhy},
                               {"first0", ts::kTraceFirst0}, {"first_steps", ts::kTraceFirstSteps}})
            slots[name] = static_cast<int>(v);
        s.attr("TRACE_SLOTS") = slots;
    }
    s.def("merge_kind", &sl::merge_kind, py::arg("k"), py::arg("candidates"), py::arg("sorted_lists"),
          "Merge kernel variant for k, the candidates per query and whether every list is sorted best first (the "
          "search's lists): 4 sorted lists (k <= 32); 0, 1 thread lists (k <= 16, 32; at least 16384 candidates); "
          "2, 3 shared lists, 8 or 4 warps.");
    s.def("merge_threads", &sl::merge_threads, py::arg("kind"));
    s.def("dense_ld", &tunelab::sim::topk_dense_ld, py::arg("n"),
          "Row stride (floats) of MERGE=5's dense key matrix over n rows: n rounded up to a multiple of kDenseLdAlign "
          "(4, params.cuh).");
    s.def("filter_ld", &tunelab::sim::topk_filter_ld, py::arg("splits"), py::arg("seg_rows"),
          "Row stride (elements) of MERGE=6's candidate rows: splits segments of seg_rows entries (a split's corpus "
          "rows), then (in cand_idx) the segments' counts, rounded up to a multiple of 4.");
    s.def("merge_smem_bytes", &sl::merge_smem_bytes, py::arg("kind"), py::arg("k"));
    s.def("merge_name_expression", &sl::merge_name_expression, py::arg("dtype"), py::arg("metric"), py::arg("kind"));
    s.def(
        "merge_pack",
        [](unsigned long long ck, unsigned long long ci, unsigned long long q, long long qs, unsigned long long ok,
           unsigned long long oi, unsigned long long os, unsigned long long ox, long long nq, long long d, long long k,
           long long lists, long long list_len, long long list_stride, long long query_stride, bool implicit,
           bool filtered_rows) {
            return py::bytes(sl::merge_pack(ck, ci, q, qs, ok, oi, os, ox, nq, d, k, lists, list_len, list_stride,
                                            query_stride, implicit, filtered_rows));
        },
        py::arg("cand_key"), py::arg("cand_idx"), py::arg("queries"), py::arg("q_stride"), py::arg("out_key"),
        py::arg("out_idx"), py::arg("out_score"), py::arg("out_index"), py::arg("nq"), py::arg("d"), py::arg("k"),
        py::arg("num_lists"), py::arg("list_len") = 0, py::arg("list_stride") = 0, py::arg("query_stride") = 0,
        py::arg("implicit_index") = false, py::arg("filtered_rows") = false,
        "MergeParams bytes (pass to ArgPack.raw(bytes, 8)); 0 skips an output pair. list_len > 0: lists of a dense "
        "score matrix at the given strides (elements). filtered_rows: the select after a MERGE=6 search (num_lists "
        "segments of list_len entries per query, then their counts).");

    // Gram
    s.def("gram_param_names", &sl::gram_param_names);
    s.def("gram_param_choices", &sl::gram_param_choices);
    s.def("gram_validate", [](const sl::Config& c, int dtype, bool symmetric) { sl::gram_validate(c, dtype, symmetric); },
          py::arg("config"), py::arg("dtype"), py::arg("symmetric"),
          "Raise ConfigError naming the broken rule for a Gram config the kernel cannot instantiate.");
    s.def("gram_smem_bytes", &sl::gram_smem_bytes, py::arg("config"), py::arg("dtype"));
    s.def("gram_threads", &sl::gram_threads, py::arg("config"));
    s.def("gram_name_expression", &sl::gram_name_expression, py::arg("config"), py::arg("dtype"), py::arg("symmetric"),
          py::arg("mirror"), py::arg("epilogue") = 0);
    s.def(
        "gram_grid",
        [](const sl::Config& c, long long m, long long n, bool symmetric) {
            auto g = sl::gram_grid(c, m, n, symmetric);
            return py::make_tuple(g[0], g[1], g[2]);
        },
        py::arg("config"), py::arg("m"), py::arg("n"), py::arg("symmetric"));
    s.def(
        "gram_pack",
        [](const sl::Config& c, int dtype, bool symmetric, unsigned long long x, unsigned long long y,
           unsigned long long out, long long xs, long long ys, long long os, long long m, long long n, long long d) {
            return py::bytes(sl::gram_pack(c, dtype, symmetric, x, y, out, xs, ys, os, m, n, d));
        },
        py::arg("config"), py::arg("dtype"), py::arg("symmetric"), py::arg("x"), py::arg("y"), py::arg("out"),
        py::arg("x_stride"), py::arg("y_stride"), py::arg("out_stride"), py::arg("m"), py::arg("n"), py::arg("d"));
    s.attr("SEARCH_PARAMS_BYTES") = static_cast<int>(sizeof(tunelab::sim::SearchParams));
    s.attr("MERGE_PARAMS_BYTES") = static_cast<int>(sizeof(tunelab::sim::MergeParams));
    s.attr("GRAM_PARAMS_BYTES") = static_cast<int>(sizeof(tunelab::sim::GramParams));
}

}  // namespace tunelab::bindings

TUNELAB_REGISTER_BINDINGS(similarity, tunelab::bindings::bind_similarity);
