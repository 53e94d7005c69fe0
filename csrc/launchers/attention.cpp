#include "launchers/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <sstream>

#include "core/errors.h"
#include "launchers/args.h"
#include "launchers/config.h"
#include "kernels/attention/params.cuh"

namespace tunelab::launchers::attention {

namespace {

[[noreturn]] void bad(const std::string& msg) { config_error("attention", msg); }

// The grid's dimensions for (batch, heads, seqlen_q), checked against the launch limits.
void check_grid_sizes(long long batch, long long heads, long long seqlen_q) {
    if (seqlen_q < 1) throw InputError("query length " + std::to_string(seqlen_q) + " must be >= 1");
    if (heads < 1 || heads > 65535)
        throw InputError("heads=" + std::to_string(heads) + " is outside 1..65535 (grid dimension y)");
    if (batch < 1 || batch > 65535)
        throw InputError("batch=" + std::to_string(batch) + " is outside 1..65535 (grid dimension z)");
}

std::string hex(unsigned long long v) {
    std::ostringstream s;
    s << "0x" << std::hex << v;
    return s.str();
}

}  // namespace

const std::vector<std::string>& param_names() {
    static const std::vector<std::string> names = {"BLOCK_M", "BLOCK_N",   "NUM_WARPS", "STAGES",        "SWIZZLE",
                                                   "VEC_LOAD", "Q_IN_REGS", "UNROLL",    "KV_SPLIT_WARPS"};
    return names;
}

const std::map<std::string, std::vector<long long>>& param_choices() {
    static const std::map<std::string, std::vector<long long>> choices = {
        {"BLOCK_M", {16, 32, 64, 128, 256}},  // query rows per CTA
        {"BLOCK_N", {32, 64, 128}},           // key rows per pipeline stage
        {"NUM_WARPS", {2, 4, 8}},
        {"STAGES", {2, 3, 4}},              // cp.async ring depth (KV tiles in flight + 1)
        {"SWIZZLE", {0, 1, 2}},             // 0 plain (bank conflicts), 1 XOR swizzle, 2 padded rows
        {"VEC_LOAD", {4, 8, 16}},           // bytes per cp.async
        {"Q_IN_REGS", {0, 1}},              // Q fragments kept in registers vs re-read from smem
        {"UNROLL", {0, 1, 2}},              // 0 = full; unroll of the QK^T head-dim loop and copy loops
        {"KV_SPLIT_WARPS", {1, 2, 4}},      // warps sharing query rows, splitting each KV tile's columns
    };
    return choices;
}

const std::vector<int>& head_dims() {
    static const std::vector<int> dims = {32, 64, 96, 128, 256};
    return dims;
}

Parsed validate(const Config& config, int head_dim, int dtype) {
    const auto& names = param_names();
    const auto& choices = param_choices();
    std::map<std::string, int> v = checked("attention", config, names, choices);
    const auto& dims = head_dims();
    if (std::find(dims.begin(), dims.end(), head_dim) == dims.end()) {
        std::vector<long long> d(dims.begin(), dims.end());
        bad("head_dim=" + std::to_string(head_dim) + " is not supported; supported head dims are " + join(d));
    }
    if (dtype != 0 && dtype != 1) bad("dtype code " + std::to_string(dtype) + " is not 0 (fp16) or 1 (bf16)");
    Parsed p{v["BLOCK_M"], v["BLOCK_N"], v["NUM_WARPS"],      v["STAGES"],        v["SWIZZLE"],
             v["VEC_LOAD"], v["Q_IN_REGS"], v["UNROLL"], v["KV_SPLIT_WARPS"]};
    if (p.num_warps % p.kv_split_warps != 0)
        bad("KV_SPLIT_WARPS=" + std::to_string(p.kv_split_warps) + " must divide NUM_WARPS=" +
            std::to_string(p.num_warps));
    if (p.block_m % (16 * p.warps_m()) != 0)
        bad("BLOCK_M=" + std::to_string(p.block_m) + " must be a multiple of 16 * NUM_WARPS / KV_SPLIT_WARPS = " +
            std::to_string(16 * p.warps_m()) + " (every warp owns whole 16-row MMA tiles)");
    if (p.block_n % (16 * p.kv_split_warps) != 0)
        bad("BLOCK_N=" + std::to_string(p.block_n) + " must be a multiple of 16 * KV_SPLIT_WARPS = " +
            std::to_string(16 * p.kv_split_warps) + " (every warp owns whole 16-key P.V steps)");
    return p;
}

long long smem_bytes(const Config& config, int head_dim, int dtype) {
    // Mirrors AttentionTraits (fwd.cuh); tests compile the kernel with -DTUNELAB_EXPECTED_SMEM=<this>
    // so a static_assert proves the two agree.
    const Parsed p = validate(config, head_dim, dtype);
    const long long pitch = 2LL * head_dim + (p.swizzle == 2 ? 16 : 0);
    const long long tile = p.block_n * pitch;
    const long long stage = 2 * tile;
    const long long q_bytes = p.block_m * pitch;
    const long long q_offset = p.q_in_regs ? (p.stages - 1) * stage : p.stages * stage;
    const long long pipe = std::max(p.stages * stage, q_offset + q_bytes);
    const long long acc_pitch = (head_dim + 8LL) * 4;
    const long long reduce = p.kv_split_warps > 1 ? p.kv_split_warps * p.block_m * (acc_pitch + 8) : 0;
    return std::max(pipe, reduce);
}

int threads(const Config& config) {
    return checked("attention", config, param_names(), param_choices())["NUM_WARPS"] * 32;
}

std::string name_expression(const Config& config, int dtype, int head_dim, bool causal) {
    const Parsed p = validate(config, head_dim, dtype);
    std::ostringstream s;
    s << "tunelab::attention_fwd<tunelab::AttentionTraits<" << dtype << "," << head_dim << "," << p.block_m << ","
      << p.block_n << "," << p.num_warps << "," << p.stages << "," << p.swizzle << "," << p.vec_load << ","
      << p.q_in_regs << "," << p.unroll << "," << p.kv_split_warps << "," << (causal ? 1 : 0) << ">>";
    return s.str();
}

std::array<unsigned, 3> grid(const Config& config, long long batch, long long heads, long long seqlen_q) {
    const long long block_m = checked("attention", config, param_names(), param_choices())["BLOCK_M"];
    check_grid_sizes(batch, heads, seqlen_q);
    const long long blocks = (seqlen_q + block_m - 1) / block_m;
    return {static_cast<unsigned>(blocks), static_cast<unsigned>(heads), static_cast<unsigned>(batch)};
}

int max_vec_load(const std::vector<unsigned long long>& pointers, const std::vector<long long>& strides) {
    return widest_copy(2, pointers, strides, 0);
}

std::string pack(const Config& config, int head_dim, int dtype, unsigned long long q, unsigned long long k,
                 unsigned long long v, unsigned long long o, unsigned long long lse, const Strides& qs,
                 const Strides& ks, const Strides& vs, const Strides& os, long long batch, long long heads,
                 long long seqlen_q, long long seqlen_k, long long causal_offset, double scale) {
    const Parsed p = validate(config, head_dim, dtype);
    check_grid_sizes(batch, heads, seqlen_q);
    if (seqlen_k < 1) throw InputError("key length " + std::to_string(seqlen_k) + " must be >= 1");
    if (seqlen_q > (1LL << 30) || seqlen_k > (1LL << 30))
        throw InputError("sequence lengths above 2^30 are not supported (got Sq=" + std::to_string(seqlen_q) +
                         ", Sk=" + std::to_string(seqlen_k) + ")");
    if (std::llabs(causal_offset) > (1LL << 30))
        throw InputError("causal_offset=" + std::to_string(causal_offset) + " is outside +-2^30");
    if (!(scale > 0.0) || !std::isfinite(scale))
        throw InputError("softmax scale=" + std::to_string(scale) +
                         " is not accepted; it must be finite and > 0 (the kernel takes max(scale*s) as scale*max(s))");
    null_check({{"q", q}, {"k", k}, {"v", v}, {"o", o}});
    // cp.async of VEC_LOAD bytes needs that alignment of every row start; the epilogue stores 16 bytes.
    const int vec_in = max_vec_load({q, k, v}, {qs.batch, qs.head, qs.seq, ks.batch, ks.head, ks.seq, vs.batch,
                                                vs.head, vs.seq});
    if (vec_in < p.vec_load)
        throw InputError("VEC_LOAD=" + std::to_string(p.vec_load) + " needs q, k, v pointers aligned to " +
                         std::to_string(p.vec_load) + " bytes and strides that are multiples of " +
                         std::to_string(p.vec_load / 2) + " elements; these inputs allow VEC_LOAD <= " +
                         std::to_string(vec_in) + " (use a config with a smaller VEC_LOAD or .contiguous() inputs)");
    if (max_vec_load({o}, {os.batch, os.head, os.seq}) < 16)
        throw InputError("the output (at " + hex(o) + ", strides batch " + std::to_string(os.batch) + ", head " +
                         std::to_string(os.head) + ", seq " + std::to_string(os.seq) +
                         " elements) must be 16-byte aligned with strides that are multiples of 8 elements; "
                         "pass a contiguous output or let the op allocate it");
    if (lse % 4 != 0)
        throw InputError("the LSE buffer at " + hex(lse) + " is not 4-byte aligned; pass a float32 tensor");

    AttentionParams prm;
    std::memset(&prm, 0, sizeof(prm));
    prm.q = reinterpret_cast<const void*>(q);
    prm.k = reinterpret_cast<const void*>(k);
    prm.v = reinterpret_cast<const void*>(v);
    prm.o = reinterpret_cast<void*>(o);
    prm.lse = reinterpret_cast<float*>(lse);
    prm.q_batch_stride = qs.batch;
    prm.q_head_stride = qs.head;
    prm.q_seq_stride = qs.seq;
    prm.k_batch_stride = ks.batch;
    prm.k_head_stride = ks.head;
    prm.k_seq_stride = ks.seq;
    prm.v_batch_stride = vs.batch;
    prm.v_head_stride = vs.head;
    prm.v_seq_stride = vs.seq;
    prm.o_batch_stride = os.batch;
    prm.o_head_stride = os.head;
    prm.o_seq_stride = os.seq;
    prm.batch = static_cast<int>(batch);
    prm.heads = static_cast<int>(heads);
    prm.seqlen_q = static_cast<int>(seqlen_q);
    prm.seqlen_k = static_cast<int>(seqlen_k);
    prm.causal_offset = static_cast<int>(causal_offset);
    prm.scale_log2 = static_cast<float>(scale * 1.4426950408889634074);  // log2(e)
    return param_bytes(prm);
}

}  // namespace tunelab::launchers::attention
