// tunelab._core.attention: thin bindings of csrc/launchers/attention.{h,cpp}.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "bindings/registry.h"
#include "kernels/attention/params.cuh"
#include "launchers/attention.h"

namespace py = pybind11;
namespace att = tunelab::launchers::attention;

namespace {

att::Strides strides(const std::vector<long long>& s, const char* what) {
    if (s.size() != 3)
        throw att::InputError(std::string(what) + " strides must be (batch, head, seq) in elements; got " +
                              std::to_string(s.size()) + " values");
    return {s[0], s[1], s[2]};
}

}  // namespace

namespace tunelab::bindings {

void bind_attention(py::module_& m) {
    py::module_ a = m.def_submodule("attention", "Launcher of the attention forward kernel family.");

    a.def("param_names", &att::param_names, "Tunables in template order.");
    a.def("param_choices", &att::param_choices, "Accepted values of each tunable on its own.");
    a.def("head_dims", &att::head_dims, "Supported head dims.");
    a.def("validate", [](const att::Config& c, int head_dim, int dtype) { att::validate(c, head_dim, dtype); },
          py::arg("config"), py::arg("head_dim"), py::arg("dtype"),
          "Raise ConfigError naming the broken rule for a config the kernel cannot instantiate.");
    a.def("smem_bytes", &att::smem_bytes, py::arg("config"), py::arg("head_dim"), py::arg("dtype"),
          "Dynamic shared memory per block in bytes (the kernel has no static shared memory).");
    a.def("threads", &att::threads, py::arg("config"));
    a.def("name_expression", &att::name_expression, py::arg("config"), py::arg("dtype"), py::arg("head_dim"),
          py::arg("causal"));
    a.def(
        "grid",
        [](const att::Config& c, long long b, long long h, long long sq) {
            auto g = att::grid(c, b, h, sq);
            return py::make_tuple(g[0], g[1], g[2]);
        },
        py::arg("config"), py::arg("batch"), py::arg("heads"), py::arg("seqlen_q"));
    a.def("max_vec_load", &att::max_vec_load, py::arg("pointers"), py::arg("strides"));
    a.def(
        "pack",
        [](const att::Config& c, int head_dim, int dtype, unsigned long long q, unsigned long long k,
           unsigned long long v, unsigned long long o, unsigned long long lse, const std::vector<long long>& qs,
           const std::vector<long long>& ks, const std::vector<long long>& vs, const std::vector<long long>& os,
           long long batch, long long heads, long long sq, long long sk, long long causal_offset, double scale) {
            return py::bytes(att::pack(c, head_dim, dtype, q, k, v, o, lse, strides(qs, "q"), strides(ks, "k"),
                                       strides(vs, "v"), strides(os, "o"), batch, heads, sq, sk, causal_offset,
                                       scale));
        },
        py::arg("config"), py::arg("head_dim"), py::arg("dtype"), py::arg("q"), py::arg("k"), py::arg("v"),
        py::arg("o"), py::arg("lse"), py::arg("q_strides"), py::arg("k_strides"), py::arg("v_strides"),
        py::arg("o_strides"), py::arg("batch"), py::arg("heads"), py::arg("seqlen_q"), py::arg("seqlen_k"),
        py::arg("causal_offset"), py::arg("scale"),
        "AttentionParams bytes for one launch (pass to ArgPack.raw(bytes, 8)).");
    a.attr("PARAMS_BYTES") = sizeof(tunelab::AttentionParams);
}

}  // namespace tunelab::bindings

TUNELAB_REGISTER_BINDINGS(attention, tunelab::bindings::bind_attention);
