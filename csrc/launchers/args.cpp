#include "launchers/args.h"

#include "core/errors.h"

namespace tunelab::launchers {

int widest_copy(int elem_bytes, const std::vector<unsigned long long>& pointers, const std::vector<long long>& strides,
                long long row_elems) {
    for (int vec : {16, 8, 4}) {
        bool ok = (row_elems * elem_bytes) % vec == 0;
        for (auto p : pointers) ok = ok && p % vec == 0;
        for (auto s : strides) ok = ok && (s * elem_bytes) % vec == 0;
        if (ok) return vec;
    }
    return 0;
}

void null_check(std::initializer_list<std::pair<const char*, unsigned long long>> pointers) {
    for (const auto& [name, ptr] : pointers)
        if (!ptr) throw InputError(std::string(name) + " is a null device pointer; pass a CUDA tensor's data_ptr()");
}

}  // namespace tunelab::launchers
