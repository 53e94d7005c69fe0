// What every launcher does with kernel arguments: null-pointer checks, the widest copy that tensors allow, and a
// parameter struct's bytes for ArgPack.raw (the kernels take one __grid_constant__ struct).
#pragma once

#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

namespace tunelab::launchers {

// The widest copy, 16, 8 or 4 bytes (0 if none), that every pointer, every row stride (in elements of
// elem_bytes) and a row of row_elems elements (0: no row condition) are multiples of.
int widest_copy(int elem_bytes, const std::vector<unsigned long long>& pointers, const std::vector<long long>& strides,
                long long row_elems);

// InputError naming the first null pointer of (name, pointer) pairs.
void null_check(std::initializer_list<std::pair<const char*, unsigned long long>> pointers);

template <class T>
std::string param_bytes(const T& v) {
    return std::string(reinterpret_cast<const char*>(&v), sizeof(T));
}

}  // namespace tunelab::launchers
