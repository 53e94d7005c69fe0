#include "core/device.h"

#include <cstdio>

#include "core/driver.h"

namespace tunelab {

int device_count() {
    int n = 0;
    check(driver().cuDeviceGetCount(&n), "cuDeviceGetCount");
    return n;
}

DeviceInfo device_info(int ordinal) {
    const DriverApi& d = driver();
    CUdevice dev;
    check(d.cuDeviceGet(&dev, ordinal), "cuDeviceGet");
    DeviceInfo info;
    info.ordinal = ordinal;
    char name[256] = {0};
    check(d.cuDeviceGetName(name, sizeof name, dev), "cuDeviceGetName");
    info.name = name;
    CUuuid uuid;
    check(d.cuDeviceGetUuid(&uuid, dev), "cuDeviceGetUuid");
    char buf[64];
    const unsigned char* u = reinterpret_cast<const unsigned char*>(uuid.bytes);
    std::snprintf(buf, sizeof buf, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0],
                  u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
    info.uuid = buf;
    auto attr = [&](CUdevice_attribute a) {
        int v = 0;
        check(d.cuDeviceGetAttribute(&v, a, dev), "cuDeviceGetAttribute");
        return v;
    };
    info.cc_major = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
    info.cc_minor = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
    info.arch = "sm_" + std::to_string(info.cc_major * 10 + info.cc_minor);
    info.sm_count = attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
    info.max_threads_per_block = attr(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
    info.max_threads_per_sm = attr(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR);
    info.max_blocks_per_sm = attr(CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR);
    info.warp_size = attr(CU_DEVICE_ATTRIBUTE_WARP_SIZE);
    info.regs_per_block = attr(CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK);
    info.regs_per_sm = attr(CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR);
    info.smem_per_block = attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK);
    info.smem_per_block_optin = attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN);
    info.smem_per_sm = attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR);
    info.reserved_smem_per_block = attr(CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK);
    info.l2_bytes = attr(CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE);
    info.sm_clock_khz = attr(CU_DEVICE_ATTRIBUTE_CLOCK_RATE);
    info.memory_clock_khz = attr(CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE);
    info.memory_bus_width = attr(CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH);
    size_t total = 0;
    check(d.cuDeviceTotalMem(&total, dev), "cuDeviceTotalMem");
    info.total_memory = (long long)total;
    auto mem = memory_info(ordinal);
    info.free_memory = mem.first;
    return info;
}

std::vector<DeviceInfo> devices() {
    std::vector<DeviceInfo> out;
    for (int i = 0, n = device_count(); i < n; ++i) out.push_back(device_info(i));
    return out;
}

std::pair<long long, long long> memory_info(int ordinal) {
    const DriverApi& d = driver();
    CUcontext previous = nullptr;
    check(d.cuCtxGetCurrent(&previous), "cuCtxGetCurrent");
    ensure_context(ordinal);
    size_t free_b = 0, total_b = 0;
    CUresult r = d.cuMemGetInfo(&free_b, &total_b);
    // Asking about another device must not change which context this thread (and torch) works in.
    if (previous) d.cuCtxSetCurrent(previous);
    check(r, "cuMemGetInfo");
    return {(long long)free_b, (long long)total_b};
}

}  // namespace tunelab
