// The CUDA driver, opened lazily with dlopen. Nothing here links libcuda: `import tunelab` must work on a
// machine without a driver; only the first GPU operation looks for one, and fails with NoDeviceError if absent.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace tunelab {

// The driver entry points tunelab uses, each resolved by the exact symbol cuda.h declares (e.g. cuMemAlloc_v2),
// so its signature is the one compiled against.
struct DriverApi {
#define TUNELAB_DRIVER_FN(name) decltype(&::name) name = nullptr;
#include "core/driver_functions.inc"
#undef TUNELAB_DRIVER_FN
};

// Loads the driver on first use and calls cuInit. Throws NoDeviceError naming the reason when it cannot.
const DriverApi& driver();
bool driver_available(std::string* why = nullptr);
int driver_version();

// Throws the matching C++ exception (PoisonedContextError for sticky errors) naming `call`.
void check(CUresult result, const char* call);
bool is_sticky_error(CUresult result);
std::string error_name(CUresult result);

// Makes a context current on this thread: the one already current (torch's, typically), else the primary
// context of `device` (default: device 0). Returns the device ordinal of the current context.
int ensure_context(int device = -1);
// ensure_context() for the device memory at `ptr`, for calls that need a context but take no function (a tensor
// map's encoding): a thread with a current context keeps it; a thread without one (a caller's worker thread that has
// not used CUDA yet) gets the primary context of the device that holds `ptr` (device 0's if the driver cannot say).
int ensure_context_for(unsigned long long ptr);

class Module;

class Function {
public:
    Function(std::shared_ptr<Module> module, CUfunction fn, std::string name);
    CUfunction handle() const { return fn_; }
    const std::string& name() const { return name_; }
    int attribute(CUfunction_attribute attr) const;
    void set_max_dynamic_smem(int bytes);
    // The shared-memory carveout the driver should prefer for this function, in percent of the SM's unified
    // L1/shared capacity (CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT: 0..100, or -1 for no preference).
    // ConfigError for a value outside that range.
    void set_shared_carveout(int percent);
    // (offset, size) of each kernel parameter, from the driver (CUDA >= 12.4).
    std::vector<std::pair<size_t, size_t>> param_info() const;
    // Raises the function's dynamic shared-memory limit to `bytes` when it is below (launches and occupancy
    // queries need it above 48 KiB); ConfigError naming both figures when the GPU's opt-in limit is smaller.
    void reserve_dynamic_smem(size_t bytes);
    // Makes the context the module was loaded into current on this thread (a launch from a thread that has
    // none current, or another device's, would otherwise fail or run in the wrong context).
    void activate() const;
    // Resident blocks per SM for `threads` and `dynamic_smem` (reserving the shared memory first, as a launch
    // would: the driver answers 0 blocks otherwise).
    int driver_occupancy(int threads, size_t dynamic_smem);
    // Clusters of `cluster` blocks (along y) that the whole GPU holds at once for `threads` and `dynamic_smem`
    // (cuOccupancyMaxActiveClusters: clusters must fit in one GPC, so this can be below SMs x blocks / cluster).
    int driver_max_active_clusters(int threads, size_t dynamic_smem, int cluster);

private:
    std::shared_ptr<Module> module_;  // keeps the module loaded while the function is alive
    CUfunction fn_;
    std::string name_;
    int max_dynamic_smem_ = 48 * 1024;
};

class Module : public std::enable_shared_from_this<Module> {
public:
    static std::shared_ptr<Module> load(const std::string& cubin);
    ~Module();
    std::shared_ptr<Function> function(const std::string& name);
    CUmodule handle() const { return mod_; }
    CUcontext context() const { return ctx_; }

private:
    Module() = default;
    CUmodule mod_ = nullptr;
    CUcontext ctx_ = nullptr;
};

// Kernel parameters in order, each aligned to its natural alignment, as cuLaunchKernel expects.
class ArgPack {
public:
    void add(const void* data, size_t size, size_t align);
    template <class T> void add_value(T v) { add(&v, sizeof v, alignof(T)); }
    std::vector<void*> pointers();  // valid until the pack changes
    size_t count() const { return offsets_.size(); }
    const std::vector<size_t>& sizes() const { return sizes_; }

private:
    std::vector<uint8_t> storage_;
    std::vector<size_t> offsets_, sizes_;
};

struct LaunchDims {
    unsigned grid[3] = {1, 1, 1};
    unsigned block[3] = {1, 1, 1};
    unsigned smem = 0;
    unsigned cluster[3] = {1, 1, 1};  // thread-block cluster (sm_90): more than one block -> cuLaunchKernelEx
    // Programmatic dependent launch (sm_90, cuLaunchKernelEx): the kernel may start once every block of the kernel
    // before it in the stream has started (and signalled, griddepcontrol.launch_dependents) or exited, before that
    // kernel has finished; it must wait for that kernel's results itself (griddepcontrol.wait, common/pdl.cuh).
    bool programmatic = false;
    bool clustered() const { return cluster[0] * cluster[1] * cluster[2] > 1; }
    bool extended() const { return clustered() || programmatic; }  // needs cuLaunchKernelEx
};

void launch(Function& fn, const LaunchDims& dims, CUstream stream, ArgPack& args);

// A launch with everything resolved in advance: the cheapest thing to call from the timer's hot loop.
class PreparedLaunch {
public:
    PreparedLaunch(std::shared_ptr<Function> fn, LaunchDims dims, ArgPack args);
    void operator()(CUstream stream);
    void activate() const { fn_->activate(); }  // make its function's context current

private:
    std::shared_ptr<Function> fn_;
    LaunchDims dims_;
    ArgPack args_;
    std::vector<void*> ptrs_;
};

}  // namespace tunelab
