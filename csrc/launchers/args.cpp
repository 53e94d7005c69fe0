#include "launchers/args.h"

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

}  // namespace tunelab::launchers
