#include "core/compiler.h"

#include <nvrtc.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <regex>
#include <sstream>

#include "core/errors.h"
#include "core/kernel_cache.h"
#include "core/nvrtc_api.h"
#include "core/sha256.h"

#ifndef TUNELAB_VERSION
#define TUNELAB_VERSION "dev"
#endif
#ifndef TUNELAB_CUDA_INCLUDE_DIR
#define TUNELAB_CUDA_INCLUDE_DIR "/usr/local/cuda/include"
#endif

namespace tunelab {
namespace fs = std::filesystem;

namespace {

// Bumped whenever the meaning of a cache entry changes (options we add, the result fields).
constexpr const char* kCacheFormat = "tunelab-kernel-cache-v2";

void check_nvrtc(nvrtcResult r, const char* call) {
    if (r != NVRTC_SUCCESS)
        throw Error(std::string("NVRTC call ") + call + " failed: " + nvrtc().nvrtcGetErrorString(r));
}

bool file_exists(const std::string& p) {
    std::error_code ec;
    return fs::exists(p, ec);
}

std::string read_file(const fs::path& p) {
    std::ifstream f(p, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

void validate_arch(const std::string& arch) {
    static const std::regex re(R"(sm_(\d+)([af]?))");
    std::smatch m;
    auto archs = supported_archs();
    std::string accepted;
    for (const auto& a : archs) accepted += (accepted.empty() ? "" : ", ") + a;
    if (!std::regex_match(arch, m, re) || std::find(archs.begin(), archs.end(), "sm_" + m[1].str()) == archs.end())
        throw ConfigError("arch '" + arch + "' is not one this NVRTC (" + nvrtc_version() +
                          ") can compile for; accepted: " + accepted +
                          " (an 'a' suffix, e.g. sm_90a, selects the arch-specific features)");
}

// Everything that can change the produced cubin goes into the key. Headers found through include_dirs are
// hashed wholesale (NVRTC does not report which ones a source actually included).
std::string cache_key(const CompileRequest& req, const std::vector<std::string>& options) {
    Sha256 h;
    h.update_field(kCacheFormat);
    h.update_field(TUNELAB_VERSION);
    h.update_field(nvrtc_version());
    h.update_field(req.arch);
    h.update_field(req.source_name);
    h.update_field(req.source);
    for (const auto& o : options) h.update_field(o);
    for (const auto& e : req.name_expressions) h.update_field("expr:" + e);
    for (const auto& [name, content] : req.headers) { h.update_field("hdr:" + name); h.update_field(content); }
    for (const auto& dir : req.include_dirs) {
        std::vector<fs::path> files;
        std::error_code ec;
        for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::recursive_directory_iterator();
             it.increment(ec)) {
            if (!it->is_regular_file()) continue;
            auto ext = it->path().extension().string();
            if (ext == ".h" || ext == ".cuh" || ext == ".hpp" || ext == ".inc" || ext == ".inl" || ext == ".cu")
                files.push_back(it->path());
        }
        std::sort(files.begin(), files.end());
        for (const auto& f : files) {
            h.update_field("inc:" + fs::relative(f, dir).string());
            h.update_field(read_file(f));
        }
    }
    return h.hex_digest();
}

struct ProgramGuard {
    nvrtcProgram prog = nullptr;
    ~ProgramGuard() { if (prog) nvrtc().nvrtcDestroyProgram(&prog); }
};

struct RawCompile {
    nvrtcResult rc = NVRTC_SUCCESS;
    std::string log, cubin;
    std::map<std::string, std::string> lowered_names;
    std::map<std::string, ResourceUsage> resources;
};

// Every kernel the request named has its ptxas report. (A name expression may also name a __device__
// variable, which has none: only names whose code is in the cubin, as a .text.<name> section, are required.)
bool report_complete(const RawCompile& raw) {
    for (const auto& [expr, lowered] : raw.lowered_names)
        if (!raw.resources.count(lowered) && raw.cubin.find(".text." + lowered) != std::string::npos) return false;
    return !(raw.resources.empty() && raw.cubin.find(".text.") != std::string::npos);
}

RawCompile run_nvrtc(const CompileRequest& req, const std::vector<std::string>& options) {
    std::vector<const char*> header_sources, header_names;
    for (const auto& [name, content] : req.headers) {
        header_names.push_back(name.c_str());
        header_sources.push_back(content.c_str());
    }
    ProgramGuard guard;
    check_nvrtc(nvrtc().nvrtcCreateProgram(&guard.prog, req.source.c_str(), req.source_name.c_str(),
                                   int(header_sources.size()), header_sources.data(), header_names.data()),
                "nvrtcCreateProgram");
    for (const auto& e : req.name_expressions)
        check_nvrtc(nvrtc().nvrtcAddNameExpression(guard.prog, e.c_str()), "nvrtcAddNameExpression");
    std::vector<const char*> opt_ptrs;
    for (const auto& o : options) opt_ptrs.push_back(o.c_str());
    RawCompile out;
    out.rc = nvrtc().nvrtcCompileProgram(guard.prog, int(opt_ptrs.size()), opt_ptrs.data());

    size_t log_size = 0;
    nvrtc().nvrtcGetProgramLogSize(guard.prog, &log_size);
    std::string log(log_size, '\0');
    if (log_size) nvrtc().nvrtcGetProgramLog(guard.prog, log.data());
    while (!log.empty() && log.back() == '\0') log.pop_back();

    out.log = std::move(log);
    if (out.rc != NVRTC_SUCCESS) return out;
    size_t cubin_size = 0;
    check_nvrtc(nvrtc().nvrtcGetCUBINSize(guard.prog, &cubin_size), "nvrtcGetCUBINSize");
    out.cubin.resize(cubin_size);
    check_nvrtc(nvrtc().nvrtcGetCUBIN(guard.prog, out.cubin.data()), "nvrtcGetCUBIN");
    for (const auto& e : req.name_expressions) {
        const char* lowered = nullptr;
        check_nvrtc(nvrtc().nvrtcGetLoweredName(guard.prog, e.c_str(), &lowered), "nvrtcGetLoweredName");
        out.lowered_names[e] = lowered;
    }
    out.resources = parse_ptxas_report(out.log);
    return out;
}

}  // namespace

std::string nvrtc_version() {
    int major = 0, minor = 0;
    check_nvrtc(nvrtc().nvrtcVersion(&major, &minor), "nvrtcVersion");
    return std::to_string(major) + "." + std::to_string(minor);
}

std::vector<std::string> supported_archs() {
    int n = 0;
    check_nvrtc(nvrtc().nvrtcGetNumSupportedArchs(&n), "nvrtcGetNumSupportedArchs");
    std::vector<int> archs(static_cast<size_t>(n));
    check_nvrtc(nvrtc().nvrtcGetSupportedArchs(archs.data()), "nvrtcGetSupportedArchs");
    std::vector<std::string> out;
    for (int a : archs) out.push_back("sm_" + std::to_string(a));
    return out;
}

std::string default_cuda_include_dir() {
    for (const char* var : {"TUNELAB_CUDA_INCLUDE", "CUDA_HOME", "CUDA_PATH"}) {
        const char* v = std::getenv(var);
        if (!v || !*v) continue;
        std::string dir = std::string(var) == "TUNELAB_CUDA_INCLUDE" ? v : std::string(v) + "/include";
        if (file_exists(dir + "/cuda_fp16.h")) return dir;
    }
    if (file_exists(std::string(TUNELAB_CUDA_INCLUDE_DIR) + "/cuda_fp16.h")) return TUNELAB_CUDA_INCLUDE_DIR;
    return "/usr/local/cuda/include";
}

CompileResult compile(const CompileRequest& req) {
    validate_arch(req.arch);
    if (req.source.empty()) throw ConfigError("kernel source is empty: pass the CUDA C++ text to compile");

    // --no-cache: since CUDA 12.9 NVRTC may return a cubin from the driver's compute cache without running
    // ptxas, and then the log holds no resource report (seen on the H200 machine once a CUDA context
    // existed). Our own cache, keyed on everything that shapes the cubin, stores the report with the cubin.
    std::vector<std::string> options = {"-arch=" + req.arch, "-std=c++17", "-Xptxas=-v", "--no-cache",
                                        "-I" + default_cuda_include_dir()};
    for (const auto& dir : req.include_dirs) options.push_back("-I" + dir);
    if (req.max_registers > 0) options.push_back("--maxrregcount=" + std::to_string(req.max_registers));
    for (const auto& [name, value] : req.defines)
        options.push_back(value.empty() ? "-D" + name : "-D" + name + "=" + value);
    for (const auto& o : req.options) options.push_back(o);

    const auto t0 = std::chrono::steady_clock::now();
    auto elapsed_ms = [&] {
        return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    };
    const std::string key = cache_key(req, options);
    KernelCache cache(req.cache_dir);
    bool recovered = false;
    if (req.use_cache) {
        CompileResult hit;
        auto status = cache.load(key, hit);
        if (status == KernelCache::Lookup::Hit) {
            bool complete = true;
            for (const auto& e : req.name_expressions) complete = complete && hit.lowered_names.count(e);
            if (complete) {
                hit.cache_hit = true;
                hit.compile_ms = elapsed_ms();
                return hit;
            }
        }
        recovered = status == KernelCache::Lookup::Corrupt;
    }

    RawCompile raw = run_nvrtc(req, options);
    const std::string& log = raw.log;
    if (raw.rc != NVRTC_SUCCESS) {
        std::string first_error;
        std::istringstream in(log);
        for (std::string line; std::getline(in, line);)
            if (line.find("error") != std::string::npos) { first_error = line; break; }
        throw CompileError("NVRTC failed to compile '" + req.source_name + "' for " + req.arch + ": " +
                               (first_error.empty() ? nvrtc().nvrtcGetErrorString(raw.rc) : first_error),
                           log, options);
    }
    if (!report_complete(raw))
        throw CompileError("the ptxas resource report is missing from the NVRTC log (NVRTC loaded from " +
                               nvrtc_library_path() + "), so the resource gates cannot judge this kernel. If that "
                               "NVRTC ignores --no-cache, set TUNELAB_NVRTC to the CUDA toolkit's libnvrtc",
                           log, options);

    CompileResult res;
    res.arch = req.arch;
    res.log = log;
    res.key = key;
    res.options = options;
    res.recovered_corrupt_entry = recovered;
    res.cubin = std::move(raw.cubin);
    res.lowered_names = std::move(raw.lowered_names);
    res.resources = std::move(raw.resources);
    res.compile_ms = elapsed_ms();
    if (req.use_cache) cache.store(key, res);
    return res;
}

}  // namespace tunelab
