#include "core/resource_usage.h"

#include <regex>
#include <sstream>

namespace tunelab {

std::map<std::string, ResourceUsage> parse_ptxas_report(const std::string& log) {
    // ptxas prints, per entry:
    //   ptxas info    : Compiling entry function '_Z1kILi64EEvPK6__halfPfi' for 'sm_90'
    //   ptxas info    : Function properties for _Z1kILi64EEvPK6__halfPfi
    //   ptxas         .     168 bytes stack frame, 168 bytes spill stores, 168 bytes spill loads
    //   ptxas info    : Used 32 registers, used 1 barriers, 4096 bytes smem, 400 bytes cmem[0]
    // "Function properties" also appears for non-entry device functions; those lines are attributed to the
    // entry being compiled only when the name matches it.
    static const std::regex entry_re(R"(Compiling entry function '([^']+)')");
    static const std::regex props_re(R"(Function properties for (\S+))");
    static const std::regex frame_re(R"((\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads)");
    static const std::regex regs_re(R"(Used (\d+) registers)");
    static const std::regex barriers_re(R"(used (\d+) barriers)");
    static const std::regex smem_re(R"((\d+) bytes smem)");
    static const std::regex cmem_re(R"((\d+) bytes cmem\[0\])");

    std::map<std::string, ResourceUsage> out;
    std::string current, props_for;
    std::istringstream in(log);
    std::string line;
    std::smatch m;
    while (std::getline(in, line)) {
        if (std::regex_search(line, m, entry_re)) {
            current = m[1];
            out[current];
            props_for.clear();
        } else if (std::regex_search(line, m, props_re)) {
            props_for = m[1];
        } else if (std::regex_search(line, m, frame_re)) {
            if (!current.empty() && props_for == current) {
                auto& u = out[current];
                u.stack_bytes = std::stoi(m[1]);
                u.spill_store_bytes = std::stoi(m[2]);
                u.spill_load_bytes = std::stoi(m[3]);
            }
        } else if (std::regex_search(line, m, regs_re)) {
            if (current.empty()) continue;
            auto& u = out[current];
            u.registers = std::stoi(m[1]);
            if (std::regex_search(line, m, barriers_re)) u.barriers = std::stoi(m[1]);
            if (std::regex_search(line, m, smem_re)) u.static_smem_bytes = std::stoi(m[1]);
            if (std::regex_search(line, m, cmem_re)) u.constant_bytes = std::stoi(m[1]);
        }
    }
    return out;
}

}  // namespace tunelab
