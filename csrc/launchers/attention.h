// Launcher of the attention forward family (csrc/kernels/attention/fwd.cuh): config validation, the
// shared-memory formula, the template instance for a config, launch geometry and argument packing.
// This file is the single source of those rules; Python reaches them through tunelab._core.attention.
#pragma once

#include <array>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/errors.h"
#include "launchers/config.h"

namespace tunelab::launchers::attention {

// A config: tunable name -> value (the names of param_names()).
using Config = launchers::Config;

// Bad tensors or scalars raise tunelab::InputError, bad config values tunelab::ConfigError (core/errors.h).
using tunelab::InputError;

// Tunables in AttentionTraits template order (after DTYPE and HEAD_DIM, before IS_CAUSAL).
const std::vector<std::string>& param_names();
// Values each tunable accepts on its own (cross-parameter rules are in validate()).
const std::map<std::string, std::vector<long long>>& param_choices();
// Head dims the kernel supports: 32, 64, 96, 128, 256.
const std::vector<int>& head_dims();

struct Parsed {
    int block_m, block_n, num_warps, stages, swizzle, vec_load, q_in_regs, unroll, kv_split_warps;
    int warps_m() const { return num_warps / kv_split_warps; }
};

// Checks names, values, head dim and dtype, and the divisibility rules the kernel's static_asserts
// enforce. Throws tunelab::ConfigError naming the bad value and the accepted ones.
Parsed validate(const Config& config, int head_dim, int dtype);

// Dynamic shared memory of the instance, in bytes (equals AttentionTraits::kSmemBytes; the kernel has
// no static shared memory).
long long smem_bytes(const Config& config, int head_dim, int dtype);
int threads(const Config& config);

// "tunelab::attention_fwd<tunelab::AttentionTraits<DTYPE,HEAD_DIM,BLOCK_M,...,IS_CAUSAL>>"
std::string name_expression(const Config& config, int dtype, int head_dim, bool causal);

// (ceil(Sq / BLOCK_M), H, B); throws InputError when H or B exceed the grid limits.
std::array<unsigned, 3> grid(const Config& config, long long batch, long long heads, long long seqlen_q);

struct Strides {
    long long batch, head, seq;  // in elements; the head dim is contiguous
};

// The AttentionParams bytes for one launch. lse = 0 means "not requested". causal_offset: query i sees
// key j iff j <= i + causal_offset (Sk - Sq: bottom-right; 0: top-left). Checks sizes, the scale and
// the alignment that the config's VEC_LOAD copies and the 16-byte output stores need.
std::string pack(const Config& config, int head_dim, int dtype, unsigned long long q, unsigned long long k,
                 unsigned long long v, unsigned long long o, unsigned long long lse, const Strides& q_strides,
                 const Strides& k_strides, const Strides& v_strides, const Strides& o_strides, long long batch,
                 long long heads, long long seqlen_q, long long seqlen_k, long long causal_offset, double scale);

// Largest VEC_LOAD (16, 8 or 4) that the pointers and strides allow (element size 2 bytes), 0 if none.
int max_vec_load(const std::vector<unsigned long long>& pointers, const std::vector<long long>& strides);

}  // namespace tunelab::launchers::attention
