#include "core/occupancy.h"

#include <cuda_occupancy.h>

#include <climits>

#include "core/errors.h"

namespace tunelab {
namespace {

// Per-arch limits from the CUDA C++ Programming Guide's table of technical specifications per compute
// capability. Max resident blocks per SM is not here: cuda_occupancy.h knows it from the compute capability.
const std::vector<ArchLimits>& table() {
    static const std::vector<ArchLimits> t = {
        {"sm_75", 7, 5, 1024, 1024, 65536, 65536, 49152, 65536, 65536, 0, 72},
        {"sm_80", 8, 0, 1024, 2048, 65536, 65536, 49152, 167936, 166912, 1024, 108},
        {"sm_86", 8, 6, 1024, 1536, 65536, 65536, 49152, 102400, 101376, 1024, 84},
        {"sm_87", 8, 7, 1024, 1536, 65536, 65536, 49152, 167936, 166912, 1024, 16},
        {"sm_89", 8, 9, 1024, 1536, 65536, 65536, 49152, 102400, 101376, 1024, 128},
        {"sm_90", 9, 0, 1024, 2048, 65536, 65536, 49152, 233472, 232448, 1024, 132},
        {"sm_100", 10, 0, 1024, 2048, 65536, 65536, 49152, 233472, 232448, 1024, 148},
        {"sm_120", 12, 0, 1024, 1536, 65536, 65536, 49152, 102400, 101376, 1024, 170},
    };
    return t;
}

std::string base_arch(const std::string& arch) {
    // sm_90a / sm_100f share the resource limits of their base arch.
    if (!arch.empty() && (arch.back() == 'a' || arch.back() == 'f')) return arch.substr(0, arch.size() - 1);
    return arch;
}

}  // namespace

std::vector<std::string> occupancy_archs() {
    std::vector<std::string> out;
    for (const auto& a : table()) out.push_back(a.arch);
    return out;
}

const ArchLimits& arch_limits(const std::string& arch) {
    std::string base = base_arch(arch);
    for (const auto& a : table())
        if (a.arch == base) return a;
    std::string accepted;
    for (const auto& a : table()) accepted += (accepted.empty() ? "" : ", ") + a.arch;
    throw ConfigError("no occupancy limits are known for arch '" + arch + "'; accepted: " + accepted +
                      " (with an optional 'a' suffix)");
}

OccupancyResult occupancy(const std::string& arch, int threads, int registers, long long smem_bytes) {
    const ArchLimits& lim = arch_limits(arch);
    if (threads < 1 || threads > lim.max_threads_per_block)
        throw ConfigError("threads per block = " + std::to_string(threads) + " is outside 1.." +
                          std::to_string(lim.max_threads_per_block) + " for " + arch);
    if (registers < 0 || registers > 255)
        throw ConfigError("registers per thread = " + std::to_string(registers) + " is outside 0..255");
    if (smem_bytes < 0 || smem_bytes > lim.smem_per_block_optin)
        throw ConfigError("shared memory per block = " + std::to_string(smem_bytes) + " bytes exceeds " + arch +
                          "'s opt-in limit of " + std::to_string(lim.smem_per_block_optin) + " bytes");

    cudaOccDeviceProp prop;
    prop.computeMajor = lim.cc_major;
    prop.computeMinor = lim.cc_minor;
    prop.maxThreadsPerBlock = lim.max_threads_per_block;
    prop.maxThreadsPerMultiprocessor = lim.max_threads_per_sm;
    prop.regsPerBlock = lim.regs_per_block;
    prop.regsPerMultiprocessor = lim.regs_per_sm;
    prop.warpSize = 32;
    prop.sharedMemPerBlock = size_t(lim.smem_per_block);
    prop.sharedMemPerMultiprocessor = size_t(lim.smem_per_sm);
    prop.numSms = lim.sm_count;
    prop.sharedMemPerBlockOptin = size_t(lim.smem_per_block_optin);
    prop.reservedSharedMemPerBlock = size_t(lim.reserved_smem_per_block);

    // All shared memory is treated as dynamic: the occupancy maths only needs the per-block total, and the
    // opt-in limit applies whenever it exceeds the 48 KB default.
    cudaOccFuncAttributes attr;
    attr.maxThreadsPerBlock = INT_MAX;
    attr.numRegs = registers;
    attr.sharedSizeBytes = 0;
    attr.partitionedGCConfig = PARTITIONED_GC_OFF;
    attr.shmemLimitConfig = smem_bytes > lim.smem_per_block ? FUNC_SHMEM_LIMIT_OPTIN : FUNC_SHMEM_LIMIT_DEFAULT;
    attr.maxDynamicSharedSizeBytes = size_t(smem_bytes);
    attr.numBlockBarriers = 1;

    cudaOccDeviceState state;
    cudaOccResult res;
    cudaOccError err = cudaOccMaxActiveBlocksPerMultiprocessor(&res, &prop, &attr, &state, threads, size_t(smem_bytes));
    if (err != CUDA_OCC_SUCCESS)
        throw ConfigError("cuda_occupancy.h rejected the inputs for " + arch + " (threads=" + std::to_string(threads) +
                          ", registers=" + std::to_string(registers) + ", smem=" + std::to_string(smem_bytes) +
                          "): error " + std::to_string(int(err)));

    OccupancyResult out;
    out.blocks_per_sm = res.activeBlocksPerMultiprocessor;
    int warps_per_block = (threads + 31) / 32;
    out.active_warps = out.blocks_per_sm * warps_per_block;
    out.max_warps = lim.max_threads_per_sm / 32;
    out.occupancy = double(out.active_warps) / double(out.max_warps);
    out.limit_warps = res.blockLimitWarps;
    out.limit_registers = res.blockLimitRegs;
    out.limit_shared_memory = res.blockLimitSharedMem;
    out.limit_blocks = res.blockLimitBlocks;
    out.allocated_registers_per_block = res.allocatedRegistersPerBlock;
    out.allocated_smem_per_block = (long long)res.allocatedSharedMemPerBlock;
    // The limiting factor is the resource whose own limit equals the result; ties name the first in this
    // order, which is the order a tuner can act on (smem and registers are what configs change).
    unsigned f = res.limitingFactors;
    if (f & OCC_LIMIT_SHARED_MEMORY) out.limiter = "shared_memory";
    else if (f & OCC_LIMIT_REGISTERS) out.limiter = "registers";
    else if (f & OCC_LIMIT_WARPS) out.limiter = "warps";
    else if (f & OCC_LIMIT_BLOCKS) out.limiter = "blocks";
    else if (f & OCC_LIMIT_BARRIERS) out.limiter = "barriers";
    else out.limiter = "none";
    return out;
}

}  // namespace tunelab
