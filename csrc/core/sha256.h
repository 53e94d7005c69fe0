// SHA-256, used for content-addressed cache keys and for the integrity checksum of cache entries.
#pragma once

#include <cstdint>
#include <string>

namespace tunelab {

class Sha256 {
public:
    Sha256();
    void update(const void* data, size_t size);
    void update(const std::string& s) { update(s.data(), s.size()); }
    // Length-prefixed, so that ("ab","c") and ("a","bc") hash differently.
    void update_field(const std::string& s);
    std::string hex_digest();  // finalizes; call once

private:
    void block(const uint8_t* p);
    uint32_t h_[8];
    uint8_t buf_[64];
    uint64_t total_ = 0;
    size_t fill_ = 0;
};

std::string sha256_hex(const std::string& data);

}  // namespace tunelab
