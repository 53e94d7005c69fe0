// Tensor maps for TMA copies (sm_90), encoded on the host by the driver (cuTensorMapEncodeTiled). A kernel
// receives the 128 bytes inside its parameter block (csrc/kernels/common/tma.cuh reads them).
#pragma once

#include <array>
#include <cstdint>

namespace tunelab {

using TmaDescBytes = std::array<unsigned long long, 16>;

// A row-major matrix of `rows` x `cols` 16-bit elements (bf16 when `bf16`, else fp16) at `base`, rows
// `row_stride_bytes` apart, read in boxes of box_rows x box_cols elements with the 128-byte swizzle
// (box_cols * 2 must be <= 128); elements outside the matrix read as zeros. InputError naming the rule when the
// driver's alignment rules fail (base 16-byte aligned, row stride a multiple of 16 bytes below 2^40, boxes of at
// most 256 rows); NoDeviceError without a driver.
TmaDescBytes encode_tma_2d_16bit(uint64_t base, bool bf16, long long rows, long long cols, long long row_stride_bytes,
                                 int box_rows, int box_cols);

}  // namespace tunelab
