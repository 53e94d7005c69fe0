// Per-kernel resource usage as reported by ptxas (`-Xptxas=-v`), the figures the compiled gates act on.
#pragma once

#include <map>
#include <string>

namespace tunelab {

struct ResourceUsage {
    int registers = 0;
    int static_smem_bytes = 0;
    int spill_store_bytes = 0;
    int spill_load_bytes = 0;
    int stack_bytes = 0;   // stack frame of the entry function
    int barriers = 0;
    int constant_bytes = 0;  // cmem[0] (kernel parameters and constants)
};

// Parses the ptxas part of an NVRTC log into {mangled entry name -> usage}. Only entry functions are kept.
std::map<std::string, ResourceUsage> parse_ptxas_report(const std::string& log);

}  // namespace tunelab
