// Tensor maps for TMA copies (sm_90), encoded on the host by the driver (cuTensorMapEncodeTiled). A kernel
// receives the 128 bytes inside its parameter block (csrc/kernels/common/tma.cuh reads them).
#pragma once

#include <array>
#include <cstdint>

namespace tunelab {

using TmaDescBytes = std::array<unsigned long long, 16>;

// The row-major matrix `name` of `rows` x `cols` 16-bit elements (bf16 when `bf16`, else fp16) at `base`, rows
// `row_stride_bytes` apart, read in boxes of box_rows x box_cols elements with the 128-byte swizzle; elements
// outside the matrix read as zeros. Callers check the data rules first (launchers: 16-byte aligned base and row
// stride); what still fails here is an InputError (data) or ConfigError (box) naming the matrix and the rule.
// DriverError when the driver has no cuTensorMapEncodeTiled (before CUDA 12), NoDeviceError without a driver.
TmaDescBytes encode_tma_2d_16bit(const char* name, uint64_t base, bool bf16, long long rows, long long cols,
                                 long long row_stride_bytes, int box_rows, int box_cols);

}  // namespace tunelab
