#include "core/tma_desc.h"

#include <cuda.h>

#include <cstring>
#include <string>

#include "core/driver.h"
#include "core/errors.h"

namespace tunelab {

TmaDescBytes encode_tma_2d_16bit(const char* name, uint64_t base, bool bf16, long long rows, long long cols,
                                 long long row_stride_bytes, int box_rows, int box_cols) {
    static_assert(sizeof(CUtensorMap) == sizeof(TmaDescBytes), "CUtensorMap is 128 bytes");
    auto what = [&] {
        return std::string("TMA tensor map of ") + name + " (" + std::to_string(rows) + " x " + std::to_string(cols) +
               "): ";
    };
    if (base % 16)
        throw InputError(what() + "the data pointer is at byte " + std::to_string(base % 16) +
                         " of a 16-byte block; TMA reads 16-byte aligned tensors (pass a contiguous tensor)");
    if (row_stride_bytes % 16 || row_stride_bytes <= 0 || row_stride_bytes >= (1LL << 40))
        throw InputError(what() + "rows are " + std::to_string(row_stride_bytes) +
                         " bytes apart; TMA needs a positive multiple of 16 below 2^40 (pad the rows)");
    if (rows < 1 || cols < 1 || rows >= (1LL << 32) || cols >= (1LL << 32))
        throw InputError(what() + "both dimensions must be in 1..2^32-1");
    if (box_rows < 1 || box_rows > 256 || box_cols < 8 || box_cols * 2 > 128)
        throw ConfigError(what() + "box of " + std::to_string(box_rows) + " x " + std::to_string(box_cols) +
                          " elements; TMA with the 128-byte swizzle takes 1..256 rows of 16..128 bytes");
    const DriverApi& api = driver();
    if (!api.cuTensorMapEncodeTiled)
        throw DriverError("the CUDA driver has no cuTensorMapEncodeTiled (it needs CUDA 12.0 or newer); update the "
                          "driver, or run the kernel with a config that does not copy by TMA",
                          "cuTensorMapEncodeTiled", 0);
    ensure_context_for(base);  // the encoding needs a current context, which a caller's new thread lacks
    CUtensorMap map;
    const cuuint64_t dims[2] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows)};
    const cuuint64_t strides[1] = {static_cast<cuuint64_t>(row_stride_bytes)};
    const cuuint32_t box[2] = {static_cast<cuuint32_t>(box_cols), static_cast<cuuint32_t>(box_rows)};
    const cuuint32_t elem_strides[2] = {1, 1};
    const CUtensorMapDataType type = bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
    check(api.cuTensorMapEncodeTiled(&map, type, 2, reinterpret_cast<void*>(base), dims, strides, box, elem_strides,
                                     CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                     CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
          "cuTensorMapEncodeTiled");
    TmaDescBytes out;
    std::memcpy(out.data(), &map, sizeof map);
    return out;
}

}  // namespace tunelab
