// wgmma shared-memory matrix descriptor (PTX ISA "Matrix Descriptor Format") for the K-major, SWIZZLE_128B tiles
// the kernels use (see common/wgmma.cuh). Pure integer code: the CPU emulator's wgmma stand-in includes this same
// header, so it decodes exactly what the kernels encode.
#pragma once

namespace tunelab {
namespace wg {

// start address >> 4 (bits 0-13), leading byte offset >> 4 (bits 16-29; unused for swizzled K-major, set to 1),
// stride byte offset >> 4 (bits 32-45: 1024, one 8-row group of 128-byte rows), base offset 0 (bits 49-51),
// layout type 1 = SWIZZLE_128B (bits 62-63).
__device__ __forceinline__ unsigned long long desc_k_sw128(unsigned smem_addr) {
  unsigned long long d = static_cast<unsigned long long>((smem_addr & 0x3FFFFu) >> 4);
  d |= 1ull << 16;
  d |= (1024ull >> 4) << 32;
  d |= 1ull << 62;
  return d;
}

}  // namespace wg
}  // namespace tunelab
