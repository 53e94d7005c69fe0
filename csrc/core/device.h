// Properties of the visible CUDA devices, read from the driver.
#pragma once

#include <string>
#include <vector>

namespace tunelab {

struct DeviceInfo {
    int ordinal = 0;
    std::string name;
    std::string uuid;
    std::string arch;  // "sm_90"
    int cc_major = 0, cc_minor = 0;
    int sm_count = 0;
    int max_threads_per_block = 0;
    int max_threads_per_sm = 0;
    int max_blocks_per_sm = 0;
    int warp_size = 32;
    int regs_per_block = 0;
    int regs_per_sm = 0;
    long long smem_per_block = 0;        // default limit without opt-in
    long long smem_per_block_optin = 0;  // with cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)
    long long smem_per_sm = 0;
    long long reserved_smem_per_block = 0;
    long long l2_bytes = 0;
    int sm_clock_khz = 0;      // maximum SM clock
    int memory_clock_khz = 0;  // peak memory clock
    int memory_bus_width = 0;
    long long total_memory = 0;
    long long free_memory = 0;
};

int device_count();
DeviceInfo device_info(int ordinal);
std::vector<DeviceInfo> devices();
// Free and total memory of the device of the current context (made current if needed).
std::pair<long long, long long> memory_info(int ordinal = -1);

}  // namespace tunelab
