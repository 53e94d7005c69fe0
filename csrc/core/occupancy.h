// Static occupancy for any supported arch, computed with the toolkit's cuda_occupancy.h: no GPU needed.
#pragma once

#include <string>
#include <vector>

namespace tunelab {

struct ArchLimits {
    std::string arch;
    int cc_major, cc_minor;
    int max_threads_per_block;
    int max_threads_per_sm;
    int regs_per_block;
    int regs_per_sm;
    long long smem_per_block;          // without opt-in
    long long smem_per_sm;
    long long smem_per_block_optin;
    long long reserved_smem_per_block;
    int sm_count;                      // of the flagship part of that arch (informational)
};

struct OccupancyResult {
    int blocks_per_sm = 0;
    int active_warps = 0;
    int max_warps = 0;
    double occupancy = 0.0;
    std::string limiter;  // "warps" | "registers" | "shared_memory" | "blocks" | "barriers"
    int limit_warps = 0, limit_registers = 0, limit_shared_memory = 0, limit_blocks = 0;
    int allocated_registers_per_block = 0;
    long long allocated_smem_per_block = 0;
};

const ArchLimits& arch_limits(const std::string& arch);
std::vector<std::string> occupancy_archs();

// smem_bytes: static + dynamic shared memory of one block. Throws ConfigError for impossible inputs.
OccupancyResult occupancy(const std::string& arch, int threads, int registers, long long smem_bytes);

}  // namespace tunelab
