// tunelab._core: the pybind11 module. Bindings only; every piece of logic lives in csrc/core or csrc/launchers.
#include <pybind11/functional.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cxxabi.h>

#include <algorithm>
#include <cstdlib>

#include "bindings/registry.h"
#include "core/compiler.h"
#include "core/device.h"
#include "core/driver.h"
#include "core/errors.h"
#include "core/kernel_cache.h"
#include "core/launch_graph.h"
#include "core/nvrtc_api.h"
#include "core/occupancy.h"
#include "core/timer.h"

namespace py = pybind11;
using namespace tunelab;

namespace {

std::array<unsigned, 3> dims3(const py::object& o, const char* what) {
    std::array<unsigned, 3> d{1, 1, 1};
    if (py::isinstance<py::int_>(o)) {
        d[0] = o.cast<unsigned>();
    } else {
        auto seq = o.cast<std::vector<long long>>();
        if (seq.empty() || seq.size() > 3)
            throw ConfigError(std::string(what) + " must be an int or a tuple of 1 to 3 ints, got " +
                              std::to_string(seq.size()) + " values");
        for (size_t i = 0; i < seq.size(); ++i) {
            if (seq[i] < 1) throw ConfigError(std::string(what) + "[" + std::to_string(i) + "] = " +
                                              std::to_string(seq[i]) + " must be >= 1");
            d[i] = unsigned(seq[i]);
        }
    }
    return d;
}

LaunchDims make_dims(const py::object& grid, const py::object& block, long long smem,
                     const py::object& cluster = py::int_(1), bool programmatic = false) {
    if (smem < 0) throw ConfigError("shared memory = " + std::to_string(smem) + " bytes must be >= 0");
    LaunchDims dims;
    auto g = dims3(grid, "grid"), b = dims3(block, "block"), c = dims3(cluster, "cluster");
    std::copy(g.begin(), g.end(), dims.grid);
    std::copy(b.begin(), b.end(), dims.block);
    std::copy(c.begin(), c.end(), dims.cluster);
    for (int i = 0; i < 3; ++i) {
        if (dims.grid[i] % dims.cluster[i])
            throw ConfigError("grid[" + std::to_string(i) + "] = " + std::to_string(dims.grid[i]) +
                              " is not a multiple of cluster[" + std::to_string(i) + "] = " +
                              std::to_string(dims.cluster[i]) + ": a grid holds whole clusters");
    }
    dims.smem = unsigned(smem);
    dims.programmatic = programmatic;
    return dims;
}

py::dict usage_dict(const ResourceUsage& u) {
    py::dict d;
    d["registers"] = u.registers;
    d["static_smem_bytes"] = u.static_smem_bytes;
    d["spill_store_bytes"] = u.spill_store_bytes;
    d["spill_load_bytes"] = u.spill_load_bytes;
    d["stack_bytes"] = u.stack_bytes;
    d["barriers"] = u.barriers;
    d["constant_bytes"] = u.constant_bytes;
    return d;
}

}  // namespace

PYBIND11_MODULE(_core, m) {
    m.doc() = "tunelab's C++ core: NVRTC compiler, kernel cache, CUDA driver, devices, occupancy, timer.";
    m.attr("__version__") = TUNELAB_VERSION;

    // C++ exceptions become the classes of tunelab.errors, with their fields.
    py::register_exception_translator([](std::exception_ptr p) {
        if (!p) return;
        auto errors = py::module_::import("tunelab.errors");
        try {
            std::rethrow_exception(p);
        } catch (const CompileError& e) {
            py::object exc = errors.attr("CompileError")(e.what(), e.log, e.options);
            PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc.ptr())), exc.ptr());
        } catch (const PoisonedContextError& e) {
            py::object exc = errors.attr("PoisonedContextError")(e.what(), e.call, e.code);
            PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc.ptr())), exc.ptr());
        } catch (const NoDeviceError& e) {
            py::object exc = errors.attr("NoDeviceError")(e.what(), e.call, e.code);
            PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc.ptr())), exc.ptr());
        } catch (const DriverError& e) {
            py::object exc = errors.attr("DriverError")(e.what(), e.call, e.code);
            PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc.ptr())), exc.ptr());
        } catch (const ConfigError& e) {
            PyErr_SetString(errors.attr("ConfigError").ptr(), e.what());
        } catch (const InputError& e) {
            PyErr_SetString(errors.attr("InputError").ptr(), e.what());
        } catch (const Error& e) {
            PyErr_SetString(errors.attr("TunelabError").ptr(), e.what());
        }
    });

    // ------------------------------------------------------------------------------------------ compiler
    py::class_<ResourceUsage>(m, "ResourceUsage", "Per-kernel resources from ptxas's report.")
        .def_readonly("registers", &ResourceUsage::registers)
        .def_readonly("static_smem_bytes", &ResourceUsage::static_smem_bytes)
        .def_readonly("spill_store_bytes", &ResourceUsage::spill_store_bytes)
        .def_readonly("spill_load_bytes", &ResourceUsage::spill_load_bytes)
        .def_readonly("stack_bytes", &ResourceUsage::stack_bytes)
        .def_readonly("barriers", &ResourceUsage::barriers)
        .def_readonly("constant_bytes", &ResourceUsage::constant_bytes)
        .def_property_readonly("spills", [](const ResourceUsage& u) {
            return u.spill_store_bytes > 0 || u.spill_load_bytes > 0;
        })
        .def("to_dict", &usage_dict)
        .def("__repr__", [](const ResourceUsage& u) {
            return "ResourceUsage(registers=" + std::to_string(u.registers) +
                   ", static_smem_bytes=" + std::to_string(u.static_smem_bytes) +
                   ", spill_store_bytes=" + std::to_string(u.spill_store_bytes) +
                   ", spill_load_bytes=" + std::to_string(u.spill_load_bytes) +
                   ", stack_bytes=" + std::to_string(u.stack_bytes) + ")";
        });

    py::class_<CompileResult>(m, "CompileResult", "A compiled cubin with its log and per-kernel resources.")
        .def_property_readonly("cubin", [](const CompileResult& r) { return py::bytes(r.cubin); })
        .def_readonly("arch", &CompileResult::arch)
        .def_readonly("log", &CompileResult::log)
        .def_readonly("key", &CompileResult::key)
        .def_readonly("cache_hit", &CompileResult::cache_hit)
        .def_readonly("recovered_corrupt_entry", &CompileResult::recovered_corrupt_entry)
        .def_readonly("compile_ms", &CompileResult::compile_ms)
        .def_readonly("options", &CompileResult::options)
        .def_readonly("lowered_names", &CompileResult::lowered_names)
        .def_property_readonly("resources", [](const CompileResult& r) {
            // Keyed by mangled symbol and, for convenience, by the name expression that produced it.
            std::map<std::string, ResourceUsage> out = r.resources;
            for (const auto& [expr, sym] : r.lowered_names) {
                auto it = r.resources.find(sym);
                if (it != r.resources.end()) out[expr] = it->second;
            }
            return out;
        });

    m.def(
        "compile",
        [](const std::string& source, const std::vector<std::string>& name_expressions, const std::string& arch,
           const std::vector<std::string>& options, const std::map<std::string, std::string>& defines,
           const std::map<std::string, std::string>& headers, const std::vector<std::string>& include_dirs,
           int max_registers, bool use_cache, const std::string& cache_dir, const std::string& source_name) {
            CompileRequest req;
            req.source = source;
            req.name_expressions = name_expressions;
            req.arch = arch;
            req.options = options;
            req.defines = defines;
            req.headers = headers;
            req.include_dirs = include_dirs;
            req.max_registers = max_registers;
            req.use_cache = use_cache;
            req.cache_dir = cache_dir;
            if (!source_name.empty()) req.source_name = source_name;
            py::gil_scoped_release release;  // NVRTC is slow and thread-safe: let a thread pool compile
            return compile(req);
        },
        py::arg("source"), py::arg("name_expressions") = std::vector<std::string>{}, py::arg("arch") = "sm_90",
        py::arg("options") = std::vector<std::string>{}, py::arg("defines") = std::map<std::string, std::string>{},
        py::arg("headers") = std::map<std::string, std::string>{}, py::arg("include_dirs") = std::vector<std::string>{},
        py::arg("max_registers") = 0, py::arg("use_cache") = true, py::arg("cache_dir") = "",
        py::arg("source_name") = "",
        "Compile CUDA C++ with NVRTC into a cubin for `arch`; results are cached on disk by content.");
    m.def("demangle", [](const std::string& mangled) {
        int status = 0;
        char* out = abi::__cxa_demangle(mangled.c_str(), nullptr, nullptr, &status);
        std::string result = (status == 0 && out) ? out : mangled;  // extern "C" names come back unchanged
        std::free(out);
        return result;
    }, "Demangle a C++ symbol (a lowered kernel name) into its signature.");
    m.def("parse_ptxas_report", &parse_ptxas_report, py::arg("log"),
          "Parse ptxas's -v report into {mangled entry name: ResourceUsage}.");
    m.def("supported_archs", &supported_archs, "Archs this NVRTC can compile for.");
    m.def("nvrtc_version", &nvrtc_version);
    m.def("nvrtc_library_path", &nvrtc_library_path, "The file NVRTC was loaded from.");
    m.def("default_cuda_include_dir", &default_cuda_include_dir);
    m.def("default_kernel_cache_dir", &default_kernel_cache_dir);
    m.def("cache_entry_path", [](const std::string& key, const std::string& dir) {
        return KernelCache(dir).path_for(key);
    }, py::arg("key"), py::arg("cache_dir") = "");

    // ------------------------------------------------------------------------------------------ occupancy
    py::class_<OccupancyResult>(m, "Occupancy", "Static occupancy of one kernel configuration on one arch.")
        .def_readonly("blocks_per_sm", &OccupancyResult::blocks_per_sm)
        .def_readonly("active_warps", &OccupancyResult::active_warps)
        .def_readonly("max_warps", &OccupancyResult::max_warps)
        .def_readonly("occupancy", &OccupancyResult::occupancy)
        .def_readonly("limiter", &OccupancyResult::limiter)
        .def_readonly("limit_warps", &OccupancyResult::limit_warps)
        .def_readonly("limit_registers", &OccupancyResult::limit_registers)
        .def_readonly("limit_shared_memory", &OccupancyResult::limit_shared_memory)
        .def_readonly("limit_blocks", &OccupancyResult::limit_blocks)
        .def_readonly("allocated_registers_per_block", &OccupancyResult::allocated_registers_per_block)
        .def_readonly("allocated_smem_per_block", &OccupancyResult::allocated_smem_per_block)
        .def("__repr__", [](const OccupancyResult& o) {
            return "Occupancy(blocks_per_sm=" + std::to_string(o.blocks_per_sm) + ", active_warps=" +
                   std::to_string(o.active_warps) + "/" + std::to_string(o.max_warps) + ", limiter='" + o.limiter + "')";
        });
    m.def("occupancy", &occupancy, py::arg("arch"), py::arg("threads"), py::arg("registers"),
          py::arg("smem_bytes") = 0, "Static occupancy from cuda_occupancy.h; smem_bytes = static + dynamic.");
    m.def("occupancy_archs", &occupancy_archs);
    m.def("arch_limits", [](const std::string& arch) {
        const ArchLimits& a = arch_limits(arch);
        py::dict d;
        d["arch"] = a.arch;
        d["compute_capability"] = py::make_tuple(a.cc_major, a.cc_minor);
        d["max_threads_per_block"] = a.max_threads_per_block;
        d["max_threads_per_sm"] = a.max_threads_per_sm;
        d["regs_per_block"] = a.regs_per_block;
        d["regs_per_sm"] = a.regs_per_sm;
        d["smem_per_block"] = a.smem_per_block;
        d["smem_per_sm"] = a.smem_per_sm;
        d["smem_per_block_optin"] = a.smem_per_block_optin;
        d["reserved_smem_per_block"] = a.reserved_smem_per_block;
        return d;
    });

    // ------------------------------------------------------------------------------------------ driver
    m.def("driver_available", [] {
        std::string why;
        bool ok = driver_available(&why);
        return py::make_tuple(ok, why);
    }, "(ok, reason): whether a CUDA driver and GPU are usable, and why not.");
    m.def("driver_version", &driver_version);
    m.def("ensure_context", &ensure_context, py::arg("device") = -1);
    m.def("synchronize", [] {
        ensure_context();
        py::gil_scoped_release release;
        check(driver().cuCtxSynchronize(), "cuCtxSynchronize");
    });
    m.def("device_count", &device_count);
    m.def("memory_info", &memory_info, py::arg("device") = -1, "(free_bytes, total_bytes)");
    m.def("device_info", [](int ordinal) {
        DeviceInfo i = device_info(ordinal);
        py::dict d;
        d["ordinal"] = i.ordinal; d["name"] = i.name; d["uuid"] = i.uuid; d["arch"] = i.arch;
        d["compute_capability"] = py::make_tuple(i.cc_major, i.cc_minor);
        d["sm_count"] = i.sm_count; d["max_threads_per_block"] = i.max_threads_per_block;
        d["max_threads_per_sm"] = i.max_threads_per_sm; d["max_blocks_per_sm"] = i.max_blocks_per_sm;
        d["warp_size"] = i.warp_size; d["regs_per_block"] = i.regs_per_block; d["regs_per_sm"] = i.regs_per_sm;
        d["smem_per_block"] = i.smem_per_block; d["smem_per_block_optin"] = i.smem_per_block_optin;
        d["smem_per_sm"] = i.smem_per_sm; d["reserved_smem_per_block"] = i.reserved_smem_per_block;
        d["l2_bytes"] = i.l2_bytes; d["sm_clock_khz"] = i.sm_clock_khz; d["memory_clock_khz"] = i.memory_clock_khz;
        d["memory_bus_width"] = i.memory_bus_width; d["total_memory"] = i.total_memory;
        d["free_memory"] = i.free_memory;
        return d;
    }, py::arg("ordinal") = 0);

    py::class_<ArgPack>(m, "ArgPack", "Kernel arguments in order, each at its natural alignment.")
        .def(py::init<>())
        .def("ptr", [](ArgPack& a, unsigned long long v) { a.add_value<unsigned long long>(v); return &a; },
             py::return_value_policy::reference)
        .def("i32", [](ArgPack& a, int v) { a.add_value<int>(v); return &a; }, py::return_value_policy::reference)
        .def("u32", [](ArgPack& a, unsigned v) { a.add_value<unsigned>(v); return &a; }, py::return_value_policy::reference)
        .def("i64", [](ArgPack& a, long long v) { a.add_value<long long>(v); return &a; }, py::return_value_policy::reference)
        .def("u64", [](ArgPack& a, unsigned long long v) { a.add_value<unsigned long long>(v); return &a; },
             py::return_value_policy::reference)
        .def("f32", [](ArgPack& a, float v) { a.add_value<float>(v); return &a; }, py::return_value_policy::reference)
        .def("f64", [](ArgPack& a, double v) { a.add_value<double>(v); return &a; }, py::return_value_policy::reference)
        .def("raw", [](ArgPack& a, py::bytes b, size_t align) {
            std::string s = b;
            if (align == 0 || (align & (align - 1))) throw ConfigError("align = " + std::to_string(align) +
                                                                        " must be a power of two");
            a.add(s.data(), s.size(), align);
            return &a;
        }, py::arg("data"), py::arg("align") = 8, py::return_value_policy::reference)
        .def("__len__", &ArgPack::count)
        .def_property_readonly("sizes", &ArgPack::sizes);

    py::class_<PreparedLaunch, std::shared_ptr<PreparedLaunch>>(m, "PreparedLaunch",
        "A launch with function, dimensions and arguments resolved: call it with a stream handle.")
        .def("__call__", [](PreparedLaunch& p, unsigned long long stream) { p(reinterpret_cast<CUstream>(stream)); },
             py::arg("stream") = 0);

    py::class_<LaunchGraph, std::shared_ptr<LaunchGraph>>(m, "LaunchGraph",
        "PreparedLaunches recorded once into a CUDA graph: calling it with a stream handle replays them with one "
        "cuGraphLaunch (on a stream being captured, it makes the launches one by one instead).")
        .def(py::init([](std::vector<std::shared_ptr<PreparedLaunch>> launches) {
                 return std::make_shared<LaunchGraph>(std::move(launches));
             }), py::arg("launches"))
        .def("__call__", [](LaunchGraph& g, unsigned long long stream) { g(reinterpret_cast<CUstream>(stream)); },
             py::arg("stream") = 0);
    m.def("stream_is_capturing", [](unsigned long long stream, int device) {
        return stream_is_capturing(reinterpret_cast<CUstream>(stream), device);
    }, py::arg("stream"), py::arg("device") = -1,
       "Whether the CUDA stream `stream` (a handle; 0, the legacy stream, of `device`) is being captured into a graph "
       "right now. Makes `device`'s context current first when none of it is (default: the current one, else device "
       "0's), as a launch there does, and leaves it current.");

    py::class_<Function, std::shared_ptr<Function>>(m, "Function", "A kernel in a loaded module.")
        .def_property_readonly("name", &Function::name)
        .def("attributes", [](const Function& f) {
            py::dict d;
            d["num_regs"] = f.attribute(CU_FUNC_ATTRIBUTE_NUM_REGS);
            d["shared_size_bytes"] = f.attribute(CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES);
            d["local_size_bytes"] = f.attribute(CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES);
            d["const_size_bytes"] = f.attribute(CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES);
            d["max_threads_per_block"] = f.attribute(CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
            d["max_dynamic_shared_size_bytes"] = f.attribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES);
            d["ptx_version"] = f.attribute(CU_FUNC_ATTRIBUTE_PTX_VERSION);
            d["binary_version"] = f.attribute(CU_FUNC_ATTRIBUTE_BINARY_VERSION);
            return d;
        })
        .def("set_max_dynamic_smem", &Function::set_max_dynamic_smem)
        .def("set_shared_carveout", &Function::set_shared_carveout, py::arg("percent"),
             "Preferred shared-memory carveout in percent of the unified L1/shared capacity (0..100; -1: none).")
        .def("param_info", &Function::param_info)
        .def("driver_occupancy", &Function::driver_occupancy, py::arg("threads"), py::arg("dynamic_smem") = 0,
             "Blocks per SM according to the driver (cuOccupancyMaxActiveBlocksPerMultiprocessor).")
        .def("driver_max_active_clusters", &Function::driver_max_active_clusters, py::arg("threads"),
             py::arg("dynamic_smem"), py::arg("cluster"),
             "Clusters of `cluster` blocks the GPU holds at once (cuOccupancyMaxActiveClusters).")
        .def("launch", [](Function& f, py::object grid, py::object block, long long smem, unsigned long long stream,
                          ArgPack& args, py::object cluster, bool programmatic) {
            LaunchDims dims = make_dims(grid, block, smem, cluster, programmatic);
            launch(f, dims, reinterpret_cast<CUstream>(stream), args);
        }, py::arg("grid"), py::arg("block"), py::arg("smem"), py::arg("stream"), py::arg("args"),
             py::arg("cluster") = 1, py::arg("programmatic") = false,
             "Launch on `stream`; `cluster` (int or up to 3 ints) > 1 launches thread-block clusters (the grid must "
             "hold whole clusters); `programmatic` (sm_90) lets the kernel start before the stream's previous kernel "
             "has finished: the kernel must wait for its results itself (griddepcontrol.wait).")
        .def("prepare", [](std::shared_ptr<Function> f, py::object grid, py::object block, long long smem,
                           const ArgPack& args, py::object cluster, bool programmatic) {
            return std::make_shared<PreparedLaunch>(f, make_dims(grid, block, smem, cluster, programmatic), args);
        }, py::arg("grid"), py::arg("block"), py::arg("smem"), py::arg("args"), py::arg("cluster") = 1,
             py::arg("programmatic") = false, "The launch of `launch`, resolved once (PreparedLaunch).");

    py::class_<Module, std::shared_ptr<Module>>(m, "Module", "A cubin loaded into the current CUDA context.")
        .def(py::init([](py::bytes cubin) { return Module::load(std::string(cubin)); }), py::arg("cubin"))
        .def("function", &Module::function, py::arg("name"));

    // ------------------------------------------------------------------------------------------ timer
    m.def("time_launches", [](py::object fn, unsigned long long stream, int warmup, int samples, bool flush_l2,
                              int graph_launches, py::object prepare) {
        TimerOptions opt;
        opt.warmup = warmup;
        opt.samples = samples;
        opt.flush_l2 = flush_l2;
        opt.graph_launches = graph_launches;
        CUstream s = reinterpret_cast<CUstream>(stream);
        // A Python callable launches on the current stream itself; it is called with no arguments, exactly where
        // a prepared launch would be, so both are timed by the same loop.
        // (the messages are tunelab.timing.time_callable's, which checks first)
        auto as_launch = [](const py::object& f, const char* what, const char* accepted) -> LaunchFn {
            if (py::isinstance<PreparedLaunch>(f)) {
                auto prepared = f.cast<std::shared_ptr<PreparedLaunch>>();
                return [prepared](CUstream st) { (*prepared)(st); };
            }
            if (!PyCallable_Check(f.ptr()))
                throw ConfigError(std::string(what) + " must be " + accepted + ", got " +
                                  std::string(py::str(py::type::of(f).attr("__name__"))));
            py::function callable = f.cast<py::function>();
            return [callable](CUstream) { callable(); };
        };
        const LaunchFn launch = as_launch(fn, "fn", "a PreparedLaunch or a callable");
        const LaunchFn prep =
            prepare.is_none() ? LaunchFn() : as_launch(prepare, "prepare", "a PreparedLaunch, a callable or None");
        if (py::isinstance<PreparedLaunch>(fn) && (prepare.is_none() || py::isinstance<PreparedLaunch>(prepare))) {
            py::gil_scoped_release release;  // no Python in the loop
            return time_launches(launch, s, opt, prep);
        }
        return time_launches(launch, s, opt, prep);
    }, py::arg("fn"), py::arg("stream") = 0, py::arg("warmup") = 10, py::arg("samples") = 100,
       py::arg("flush_l2") = true, py::arg("graph_launches") = 0, py::arg("prepare") = py::none(),
       "Time `fn` (a PreparedLaunch or a Python callable) with events; returns per-launch microseconds. `prepare` (the "
       "same kinds, or None) runs after each sample's flush, before its first event: untimed.");
    m.def("l2_flush_bytes", &l2_flush_bytes);

    for (auto& [name, fn] : bindings::registry()) fn(m);
}
