// What every launcher does with kernel arguments: the widest copy that tensors allow, and a parameter struct's
// bytes for ArgPack.raw (the kernels take one __grid_constant__ struct).
#pragma once

#include <string>
#include <vector>

namespace tunelab::launchers {

// The widest copy, 16, 8 or 4 bytes (0 if none), that every pointer, every row stride (in elements of
// elem_bytes) and a row of row_elems elements (0: no row condition) are multiples of.
int widest_copy(int elem_bytes, const std::vector<unsigned long long>& pointers, const std::vector<long long>& strides,
                long long row_elems);

template <class T>
std::string param_bytes(const T& v) {
    return std::string(reinterpret_cast<const char*>(&v), sizeof(T));
}

}  // namespace tunelab::launchers
