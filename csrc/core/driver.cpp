#include "core/driver.h"

#include <dlfcn.h>

#include <cstring>
#include <mutex>

#include "core/errors.h"

namespace tunelab {
namespace {

struct Loaded {
    DriverApi api;
    bool ok = false;
    std::string why;
    int version = 0;
};

Loaded& loaded() {
    static Loaded state;
    static std::once_flag once;
    std::call_once(once, [] {
        // libcuda.so.1 is the driver's soname; the unversioned libcuda.so is the toolkit's link-time stub,
        // which must never be loaded at run time.
        void* handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
        if (!handle) {
            const char* err = dlerror();
            state.why = std::string("the CUDA driver (libcuda.so.1) could not be loaded: ") + (err ? err : "unknown") +
                        ". Compiling kernels and static occupancy work without it; launching needs an NVIDIA GPU "
                        "with its driver installed.";
            return;
        }
        // Each entry point is looked up by the exact symbol cuda.h declares (after its versioning macros, e.g.
        // cuMemGetInfo -> cuMemGetInfo_v2), so the function we call has the signature we compiled against.
        // cuGetProcAddress(name, CUDA_VERSION) would not guarantee that: for CUDA 13 it returns
        // cuCtxGetDevice_v2, which takes an extra argument the 1-argument declaration never passes.
#define TUNELAB_STR2(x) #x
#define TUNELAB_STR(x) TUNELAB_STR2(x)
#define TUNELAB_DRIVER_FN(name) \
    state.api.name = reinterpret_cast<decltype(state.api.name)>(dlsym(handle, TUNELAB_STR(name)));
#include "core/driver_functions.inc"
#undef TUNELAB_DRIVER_FN
#undef TUNELAB_STR
#undef TUNELAB_STR2
        if (!state.api.cuInit || !state.api.cuLaunchKernel) {
            state.why = "the CUDA driver lacks basic entry points (cuInit/cuLaunchKernel)";
            return;
        }
        CUresult r = state.api.cuInit(0);
        if (r != CUDA_SUCCESS) {
            const char* name = nullptr;
            if (state.api.cuGetErrorName) state.api.cuGetErrorName(r, &name);
            state.why = std::string("cuInit failed with ") + (name ? name : std::to_string(int(r))) +
                        ": no usable NVIDIA GPU is visible to this process (check nvidia-smi and "
                        "CUDA_VISIBLE_DEVICES)";
            return;
        }
        state.api.cuDriverGetVersion(&state.version);
        state.ok = true;
    });
    return state;
}

}  // namespace

const DriverApi& driver() {
    Loaded& l = loaded();
    if (!l.ok) throw NoDeviceError(l.why, "cuInit", 100);
    return l.api;
}

bool driver_available(std::string* why) {
    Loaded& l = loaded();
    if (why) *why = l.why;
    return l.ok;
}

int driver_version() { return driver_available() ? loaded().version : 0; }

std::string error_name(CUresult result) {
    const char* name = nullptr;
    if (driver_available() && loaded().api.cuGetErrorName) loaded().api.cuGetErrorName(result, &name);
    return name ? name : "CUDA error " + std::to_string(int(result));
}

bool is_sticky_error(CUresult r) {
    switch (r) {
        case CUDA_ERROR_ILLEGAL_ADDRESS:
        case CUDA_ERROR_LAUNCH_FAILED:
        case CUDA_ERROR_MISALIGNED_ADDRESS:
        case CUDA_ERROR_INVALID_ADDRESS_SPACE:
        case CUDA_ERROR_INVALID_PC:
        case CUDA_ERROR_HARDWARE_STACK_ERROR:
        case CUDA_ERROR_ILLEGAL_INSTRUCTION:
        case CUDA_ERROR_ASSERT:
        case CUDA_ERROR_LAUNCH_TIMEOUT:
        case CUDA_ERROR_CONTEXT_IS_DESTROYED:
            return true;
        default:
            return false;
    }
}

void check(CUresult result, const char* call) {
    if (result == CUDA_SUCCESS) return;
    std::string name = error_name(result);
    const char* text = nullptr;
    if (driver_available() && loaded().api.cuGetErrorString) loaded().api.cuGetErrorString(result, &text);
    std::string msg = std::string(call) + " failed: " + name + (text ? std::string(" (") + text + ")" : "");
    if (is_sticky_error(result))
        throw PoisonedContextError(
            msg + ". This is a sticky error: the CUDA context of this process is poisoned and every later CUDA "
                  "call in it (torch's too) will fail. Restart the process; run untrusted candidates in a "
                  "subprocess (the tuner's worker does).",
            call, int(result));
    if (result == CUDA_ERROR_NO_DEVICE || result == CUDA_ERROR_NOT_INITIALIZED || result == CUDA_ERROR_INVALID_DEVICE)
        throw NoDeviceError(msg, call, int(result));
    throw DriverError(msg, call, int(result));
}

int ensure_context(int device) {
    const DriverApi& d = driver();
    CUcontext ctx = nullptr;
    check(d.cuCtxGetCurrent(&ctx), "cuCtxGetCurrent");
    if (ctx && device < 0) {
        CUdevice dev;
        check(d.cuCtxGetDevice(&dev), "cuCtxGetDevice");
        return int(dev);
    }
    int ordinal = device < 0 ? 0 : device;
    int count = 0;
    check(d.cuDeviceGetCount(&count), "cuDeviceGetCount");
    if (ordinal >= count)
        throw NoDeviceError("device " + std::to_string(ordinal) + " does not exist: this process sees " +
                                std::to_string(count) + " CUDA device(s) (ordinals 0.." + std::to_string(count - 1) + ")",
                            "cuDeviceGet", int(CUDA_ERROR_INVALID_DEVICE));
    if (ctx) {
        CUdevice cur;
        check(d.cuCtxGetDevice(&cur), "cuCtxGetDevice");
        if (int(cur) == ordinal) return ordinal;
    }
    CUdevice dev;
    check(d.cuDeviceGet(&dev, ordinal), "cuDeviceGet");
    // The primary context is the one the CUDA runtime (and so torch) uses: sharing it makes torch's pointers
    // and streams valid for our launches.
    CUcontext primary;
    check(d.cuDevicePrimaryCtxRetain(&primary, dev), "cuDevicePrimaryCtxRetain");
    check(d.cuCtxSetCurrent(primary), "cuCtxSetCurrent");
    return ordinal;
}

int ensure_context_for(unsigned long long ptr) {
    const DriverApi& d = driver();
    CUcontext ctx = nullptr;
    check(d.cuCtxGetCurrent(&ctx), "cuCtxGetCurrent");
    int ordinal = -1;  // the pointer's device: a unified-addressing lookup, which needs no current context
    if (!ctx && d.cuPointerGetAttribute &&
        d.cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, CUdeviceptr(ptr)) != CUDA_SUCCESS)
        ordinal = -1;
    return ensure_context(ordinal);
}

// ---------------------------------------------------------------------------------------------- modules

std::shared_ptr<Module> Module::load(const std::string& cubin) {
    ensure_context();
    const DriverApi& d = driver();
    std::shared_ptr<Module> m(new Module());
    check(d.cuCtxGetCurrent(&m->ctx_), "cuCtxGetCurrent");
    check(d.cuModuleLoadData(&m->mod_, cubin.data()), "cuModuleLoadData");
    return m;
}

Module::~Module() {
    // At interpreter exit the driver may already be torn down; an unload failure then is harmless.
    if (mod_ && driver_available()) loaded().api.cuModuleUnload(mod_);
}

std::shared_ptr<Function> Module::function(const std::string& name) {
    CUfunction fn = nullptr;
    CUresult r = driver().cuModuleGetFunction(&fn, mod_, name.c_str());
    if (r == CUDA_ERROR_NOT_FOUND)
        throw DriverError("kernel '" + name + "' is not in this module: pass the mangled (lowered) name that "
                          "compile() returned, or declare the kernel extern \"C\"",
                          "cuModuleGetFunction", int(r));
    check(r, "cuModuleGetFunction");
    return std::make_shared<Function>(shared_from_this(), fn, name);
}

Function::Function(std::shared_ptr<Module> module, CUfunction fn, std::string name)
    : module_(std::move(module)), fn_(fn), name_(std::move(name)) {}

int Function::attribute(CUfunction_attribute attr) const {
    int v = 0;
    check(driver().cuFuncGetAttribute(&v, attr, fn_), "cuFuncGetAttribute");
    return v;
}

void Function::set_max_dynamic_smem(int bytes) {
    check(driver().cuFuncSetAttribute(fn_, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, bytes),
          "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)");
    max_dynamic_smem_ = bytes;
}

void Function::set_shared_carveout(int percent) {
    if (percent < -1 || percent > 100)
        throw ConfigError("shared-memory carveout = " + std::to_string(percent) +
                          " is not accepted: pass a percentage 0..100, or -1 for the driver's default");
    check(driver().cuFuncSetAttribute(fn_, CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, percent),
          "cuFuncSetAttribute(PREFERRED_SHARED_MEMORY_CARVEOUT)");
}

std::vector<std::pair<size_t, size_t>> Function::param_info() const {
    const DriverApi& d = driver();
    if (!d.cuFuncGetParamInfo)
        throw DriverError("the CUDA driver is older than 12.4 and cannot describe kernel parameters",
                          "cuFuncGetParamInfo", 0);
    std::vector<std::pair<size_t, size_t>> out;
    for (size_t i = 0;; ++i) {
        size_t offset = 0, size = 0;
        CUresult r = d.cuFuncGetParamInfo(fn_, i, &offset, &size);
        if (r == CUDA_ERROR_INVALID_VALUE) break;
        check(r, "cuFuncGetParamInfo");
        out.emplace_back(offset, size);
    }
    return out;
}

void Function::reserve_dynamic_smem(size_t bytes) {
    if (bytes <= size_t(max_dynamic_smem_)) return;
    const DriverApi& d = driver();
    CUdevice dev;
    check(d.cuCtxGetDevice(&dev), "cuCtxGetDevice");
    int optin = 0;
    check(d.cuDeviceGetAttribute(&optin, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, dev),
          "cuDeviceGetAttribute");
    if (bytes > size_t(optin))
        throw ConfigError("kernel '" + name_ + "' needs " + std::to_string(bytes) +
                          " bytes of dynamic shared memory; this GPU allows " + std::to_string(optin) +
                          " per block: launch with at most that much dynamic shared memory (for a tunelab family "
                          "config: smaller tiles or fewer STAGES, which the family's static gate checks)");
    set_max_dynamic_smem(int(bytes));
}

void Function::activate() const {
    const DriverApi& d = driver();
    CUcontext cur = nullptr;
    check(d.cuCtxGetCurrent(&cur), "cuCtxGetCurrent");
    if (cur != module_->context()) check(d.cuCtxSetCurrent(module_->context()), "cuCtxSetCurrent");
}

int Function::driver_occupancy(int threads, size_t dynamic_smem) {
    activate();
    reserve_dynamic_smem(dynamic_smem);
    int blocks = 0;
    check(driver().cuOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, fn_, threads, dynamic_smem),
          "cuOccupancyMaxActiveBlocksPerMultiprocessor");
    return blocks;
}

namespace {
// The cuLaunchKernelEx configuration of `dims`: its cluster dimension when it has clusters, or when `cluster_attr`
// asks for it whatever its size (the occupancy query of a cluster size, 1 included), and, when asked, programmatic
// stream serialization (`attrs` holds the attributes it points to).
CUlaunchConfig ex_launch_config(const LaunchDims& dims, CUstream stream, CUlaunchAttribute (&attrs)[2],
                                bool cluster_attr = false) {
    unsigned n = 0;
    if (cluster_attr || dims.clustered()) {
        attrs[n].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
        attrs[n].value.clusterDim.x = dims.cluster[0];
        attrs[n].value.clusterDim.y = dims.cluster[1];
        attrs[n].value.clusterDim.z = dims.cluster[2];
        ++n;
    }
    if (dims.programmatic) {
        attrs[n].id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
        attrs[n].value.programmaticStreamSerializationAllowed = 1;
        ++n;
    }
    CUlaunchConfig cfg{};
    cfg.gridDimX = dims.grid[0];
    cfg.gridDimY = dims.grid[1];
    cfg.gridDimZ = dims.grid[2];
    cfg.blockDimX = dims.block[0];
    cfg.blockDimY = dims.block[1];
    cfg.blockDimZ = dims.block[2];
    cfg.sharedMemBytes = dims.smem;
    cfg.hStream = stream;
    cfg.attrs = attrs;
    cfg.numAttrs = n;
    return cfg;
}
}  // namespace

int Function::driver_max_active_clusters(int threads, size_t dynamic_smem, int cluster) {
    activate();
    reserve_dynamic_smem(dynamic_smem);
    if (!driver().cuOccupancyMaxActiveClusters)
        throw NoDeviceError("this CUDA driver has no cuOccupancyMaxActiveClusters (thread-block clusters need CUDA 12 "
                            "and an sm_90 GPU)", "cuOccupancyMaxActiveClusters", 0);
    LaunchDims dims;  // one cluster of `cluster` blocks along y, as the search launches them
    dims.grid[1] = dims.cluster[1] = static_cast<unsigned>(cluster);
    dims.block[0] = static_cast<unsigned>(threads);
    dims.smem = static_cast<unsigned>(dynamic_smem);
    CUlaunchAttribute attrs[2]{};
    CUlaunchConfig cfg = ex_launch_config(dims, nullptr, attrs, /*cluster_attr=*/true);
    int clusters = 0;
    check(driver().cuOccupancyMaxActiveClusters(&clusters, fn_, &cfg), "cuOccupancyMaxActiveClusters");
    return clusters;
}

// ---------------------------------------------------------------------------------------------- launches

void ArgPack::add(const void* data, size_t size, size_t align) {
    size_t offset = (storage_.size() + align - 1) / align * align;
    storage_.resize(offset + size);
    std::memcpy(storage_.data() + offset, data, size);
    offsets_.push_back(offset);
    sizes_.push_back(size);
}

std::vector<void*> ArgPack::pointers() {
    std::vector<void*> ptrs;
    ptrs.reserve(offsets_.size());
    for (size_t off : offsets_) ptrs.push_back(storage_.data() + off);
    return ptrs;
}

namespace {
// cuLaunchKernel, or with a thread-block cluster or a programmatic launch cuLaunchKernelEx with their attributes.
void launch_dims(CUfunction fn, const LaunchDims& dims, CUstream stream, void** params) {
    if (!dims.extended()) {
        check(driver().cuLaunchKernel(fn, dims.grid[0], dims.grid[1], dims.grid[2], dims.block[0], dims.block[1],
                                      dims.block[2], dims.smem, stream, params, nullptr),
              "cuLaunchKernel");
        return;
    }
    if (!driver().cuLaunchKernelEx)
        throw NoDeviceError("this CUDA driver has no cuLaunchKernelEx, which a launch with thread-block clusters or a "
                            "programmatic (dependent) launch needs (the similarity ops make one on sm_90): install an "
                            "NVIDIA driver for CUDA 12 or later", "cuLaunchKernelEx", 0);
    CUlaunchAttribute attrs[2]{};
    const CUlaunchConfig cfg = ex_launch_config(dims, stream, attrs);
    check(driver().cuLaunchKernelEx(&cfg, fn, params, nullptr), "cuLaunchKernelEx");
}
}  // namespace

void launch(Function& fn, const LaunchDims& dims, CUstream stream, ArgPack& args) {
    fn.activate();
    fn.reserve_dynamic_smem(dims.smem);
    auto ptrs = args.pointers();
    launch_dims(fn.handle(), dims, stream, ptrs.data());
}

PreparedLaunch::PreparedLaunch(std::shared_ptr<Function> fn, LaunchDims dims, ArgPack args)
    : fn_(std::move(fn)), dims_(dims), args_(std::move(args)), ptrs_(args_.pointers()) {
    fn_->activate();
    fn_->reserve_dynamic_smem(dims_.smem);
}

void PreparedLaunch::operator()(CUstream stream) {
    fn_->activate();  // an op may launch on a GPU other than the current one (a context read when it is current)
    launch_dims(fn_->handle(), dims_, stream, ptrs_.data());
}

}  // namespace tunelab
