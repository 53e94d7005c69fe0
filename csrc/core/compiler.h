// Run-time compilation of CUDA C++ with NVRTC into a cubin for a real architecture. Works without a GPU.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "core/resource_usage.h"

namespace tunelab {

struct CompileRequest {
    std::string source;
    std::string source_name = "tunelab_kernel.cu";
    std::vector<std::string> name_expressions;  // e.g. "tunelab::attention_fwd<Traits<...>>"; may be empty
    std::string arch;                           // "sm_80", "sm_90", "sm_90a", ...
    std::vector<std::string> options;           // extra NVRTC options
    std::map<std::string, std::string> defines;
    std::map<std::string, std::string> headers;  // include name -> content, given to NVRTC in memory
    std::vector<std::string> include_dirs;       // passed with -I; every header file under them is hashed
    int max_registers = 0;                       // --maxrregcount when > 0
    bool use_cache = true;
    std::string cache_dir;                       // empty: the default (TUNELAB_CACHE_DIR / XDG)
};

struct CompileResult {
    std::string cubin;
    std::string arch;
    std::string log;
    std::string key;
    bool cache_hit = false;
    bool recovered_corrupt_entry = false;  // a bad cache entry was found, discarded and rebuilt
    double compile_ms = 0.0;               // NVRTC time, or cache load time on a hit
    std::vector<std::string> options;      // the exact NVRTC options used
    std::map<std::string, std::string> lowered_names;        // name expression -> mangled name
    std::map<std::string, ResourceUsage> resources;          // mangled entry name -> usage
};

CompileResult compile(const CompileRequest& request);

// Archs this NVRTC can generate code for, as "sm_XX" (plus "sm_90a" and friends where accepted).
std::vector<std::string> supported_archs();
std::string nvrtc_version();
std::string default_cuda_include_dir();

}  // namespace tunelab
