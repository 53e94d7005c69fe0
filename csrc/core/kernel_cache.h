// Content-addressed on-disk cache of compiled kernels. An entry is written to a temp file and renamed into
// place, so readers never see a half-written entry; every entry carries a checksum, so a truncated or corrupt
// one is detected, discarded and rebuilt rather than trusted.
#pragma once

#include <optional>
#include <string>

#include "core/compiler.h"

namespace tunelab {

std::string default_kernel_cache_dir();

class KernelCache {
public:
    explicit KernelCache(std::string dir);
    enum class Lookup { Hit, Miss, Corrupt };
    // On Hit fills `out` (cubin, log, lowered names, resources, arch).
    Lookup load(const std::string& key, CompileResult& out) const;
    void store(const std::string& key, const CompileResult& result) const;
    std::string path_for(const std::string& key) const;

private:
    std::string dir_;
};

}  // namespace tunelab
