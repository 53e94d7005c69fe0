// NVRTC, opened with dlopen by full path. Linking libnvrtc.so.13 by soname is not enough: when torch is imported
// first, the process already holds torch's pip copy of that soname and the dynamic linker hands us that one,
// so which NVRTC compiled our kernels would depend on import order. Loading the toolkit's copy by path makes it
// the one the package was built against, and `_core.nvrtc_library_path()` says which file it was.
#pragma once

#include <nvrtc.h>

#include <string>

namespace tunelab {

struct NvrtcApi {
#define TUNELAB_NVRTC_FN(name) decltype(&::name) name = nullptr;
#include "core/nvrtc_functions.inc"
#undef TUNELAB_NVRTC_FN
};

// Loads NVRTC on first use; throws tunelab::Error naming every place it looked when none works.
const NvrtcApi& nvrtc();
// The file NVRTC was loaded from.
std::string nvrtc_library_path();

}  // namespace tunelab
