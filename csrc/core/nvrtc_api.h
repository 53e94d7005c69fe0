// NVRTC, opened with dlopen by full path. Linking libnvrtc.so.13 by soname is not enough: when torch is imported
// first, the process already holds torch's pip copy of that soname and the dynamic linker hands us that one
// (seen on the H200 image: its ptxas report came back empty, so every resource gate would have been blind).
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
