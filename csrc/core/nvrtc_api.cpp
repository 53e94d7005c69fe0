#include "core/nvrtc_api.h"

#include <cuda.h>  // CUDA_VERSION: the NVRTC major version we were built against

#include <dlfcn.h>
#include <link.h>

#include <cstdlib>
#include <mutex>
#include <vector>

#include "core/errors.h"

#ifndef TUNELAB_NVRTC_DIR
#define TUNELAB_NVRTC_DIR "/usr/local/cuda/lib64"
#endif

namespace tunelab {
namespace {

struct State {
    NvrtcApi api;
    std::string path;
    std::string error;
};

State& state() {
    static State s;
    static std::once_flag once;
    std::call_once(once, [] {
        const std::string soname = "libnvrtc.so." + std::to_string(CUDA_VERSION / 1000);
        std::vector<std::string> candidates;
        if (const char* p = std::getenv("TUNELAB_NVRTC"); p && *p) candidates.push_back(p);
        for (const char* var : {"CUDA_HOME", "CUDA_PATH"})
            if (const char* v = std::getenv(var); v && *v) {
                candidates.push_back(std::string(v) + "/lib64/" + soname);
                candidates.push_back(std::string(v) + "/lib/" + soname);
            }
        candidates.push_back(std::string(TUNELAB_NVRTC_DIR) + "/" + soname);
        candidates.push_back("/usr/local/cuda/lib64/" + soname);
        candidates.push_back(soname);  // last resort: the loader's search path
        std::string tried;
        for (const auto& c : candidates) {
            void* h = dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL);
            if (!h) {
                const char* e = dlerror();
                tried += "\n  " + c + ": " + (e ? e : "not found");
                continue;
            }
            bool complete = true;
#define TUNELAB_NVRTC_FN(name)                                                     \
    s.api.name = reinterpret_cast<decltype(s.api.name)>(dlsym(h, #name));          \
    complete = complete && s.api.name != nullptr;
#include "core/nvrtc_functions.inc"
#undef TUNELAB_NVRTC_FN
            if (!complete) {
                tried += "\n  " + c + ": lacks NVRTC entry points";
                continue;
            }
            link_map* lm = nullptr;
            s.path = (dlinfo(h, RTLD_DI_LINKMAP, &lm) == 0 && lm && lm->l_name) ? lm->l_name : c;
            return;
        }
        s.error = "NVRTC (" + soname + ") could not be loaded; looked at:" + tried +
                  "\nInstall the CUDA toolkit (or set TUNELAB_NVRTC to the full path of " + soname + ").";
    });
    return s;
}

}  // namespace

const NvrtcApi& nvrtc() {
    State& s = state();
    if (!s.error.empty()) throw Error(s.error);
    return s.api;
}

std::string nvrtc_library_path() {
    nvrtc();
    return state().path;
}

}  // namespace tunelab
